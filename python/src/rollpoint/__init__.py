"""rollpoint: a client for trainers.

Submit rollout tasks to ``rollpoint serve agent``, await their results, read
their trajectories as numpy arrays, and take checkpoints, restores and forks
through ``rollpoint serve coordinator`` or a ``rollpoint run --listen``
control endpoint. Standard library only; numpy is optional
(``pip install 'rollpoint[numpy]'``) and needed only by
``Trajectory.to_numpy``.
"""

from .client import AsyncClient, Client, control_url
from .errors import (
    ApiError,
    BadRequest,
    Busy,
    Conflict,
    Failed,
    Lost,
    NotFound,
    NotPrepared,
    ProtocolError,
    ResultTimeout,
    RollpointError,
    TooLarge,
    TrajectoryNotTrainable,
    TransportError,
    Unauthorized,
    UnsupportedVersion,
)
from .trajectory import (
    ModelCall,
    NotTrainable,
    NumpySegment,
    Segment,
    TokenBreak,
    Trajectory,
    TrajectoryMetrics,
    iter_trajectories,
    read_trajectories,
)
from .wire import (
    CheckpointReply,
    CoordinatorStatus,
    ForkedFrom,
    ForkReply,
    LaunchEntry,
    MemberRecords,
    PeerStatus,
    PhaseTimings,
    RestoredMember,
    RestoreReply,
    RolloutRef,
    RolloutResult,
    RolloutStatus,
    RolloutTimings,
    RunStatus,
    TranscriptEntry,
    Usage,
    Verdict,
    attempt_key,
)

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "AsyncClient",
    "BadRequest",
    "Busy",
    "CheckpointReply",
    "Client",
    "Conflict",
    "CoordinatorStatus",
    "Failed",
    "ForkReply",
    "ForkedFrom",
    "LaunchEntry",
    "Lost",
    "MemberRecords",
    "ModelCall",
    "NotFound",
    "NotPrepared",
    "NotTrainable",
    "NumpySegment",
    "PeerStatus",
    "PhaseTimings",
    "ProtocolError",
    "RestoreReply",
    "RestoredMember",
    "ResultTimeout",
    "RolloutRef",
    "RolloutResult",
    "RolloutStatus",
    "RolloutTimings",
    "RollpointError",
    "RunStatus",
    "Segment",
    "TokenBreak",
    "TooLarge",
    "Trajectory",
    "TrajectoryMetrics",
    "TrajectoryNotTrainable",
    "TranscriptEntry",
    "TransportError",
    "Unauthorized",
    "UnsupportedVersion",
    "Usage",
    "Verdict",
    "__version__",
    "attempt_key",
    "control_url",
    "iter_trajectories",
    "read_trajectories",
]
