"""Replies of the rollout, coordinator and run routes as frozen dataclasses.

They mirror the services' wire types (docs/openapi.json) field for field.
Enumerations (a rollout's ``state``, a result's ``status``, a participant's
``kind``) stay plain strings so that a value a newer server adds reads
rather than fails; fields this package does not know are kept in
``extra``. Each top-level reply's ``v`` is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._parse import Obj, read
from .errors import ProtocolError

# Where a rollout stands (RolloutState).
ROLLOUT_STATES = ("queued", "running", "parked", "done", "lost", "retired")
# How a rollout ended (RolloutResultStatus). Version 1 results said
# ``failed`` where version 2 says ``infra_error``.
RESULT_STATUSES = ("verified", "unverified", "infra_error", "cancelled", "failed")
# How the infrastructure ended a rollout (a result's ``infra_class``).
INFRA_CLASSES = (
    "sandbox_lost",
    "setup_failed",
    "launch_failed",
    "model_unreachable",
    "build_failed",
    "timeout_infra",
    "restore_failed",
    "internal",
    "unclassified",
)
# The rollout result versions this client reads.
RESULT_VERSIONS = (1, 2)


def attempt_key(rollout: str, attempt: int) -> str:
    """The key checkpoints know an attempt by: ``R`` for attempt 0, ``R-aN`` after."""
    return rollout if attempt == 0 else f"{rollout}-a{attempt}"


@dataclass(frozen=True)
class RolloutRef:
    """A rollout the agent accepted (``POST /v1/rollouts``)."""

    id: str
    attempt: int
    state: str
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return attempt_key(self.id, self.attempt)


@dataclass(frozen=True)
class RolloutStatus:
    """Where a rollout without a result stands (RolloutStatus v1)."""

    rollout: str
    attempt: int
    state: str
    error: str | None = None
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return attempt_key(self.rollout, self.attempt)

    @property
    def in_flight(self) -> bool:
        """Still on the drivers, so the next checkpoint covers it."""
        return self.state in ("queued", "running", "parked")

    @staticmethod
    def parse(o: Obj) -> RolloutStatus:
        v = o.version("rollout status")
        return RolloutStatus(
            rollout=o.string("rollout"),
            attempt=o.integer("attempt"),
            state=o.string("state"),
            error=o.opt_string("error"),
            v=v,
            extra=o.extra(),
        )


@dataclass(frozen=True)
class Verdict:
    """The owner's grade of one session."""

    reward: float
    passed: bool
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    exit_code: int | None = None
    reward_error: str | None = None
    cleanup_error: str | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> Verdict:
        return Verdict(
            reward=o.number("reward"),
            passed=o.boolean("passed"),
            timed_out=o.boolean("timed_out"),
            stdout_tail=o.string("stdout_tail"),
            stderr_tail=o.string("stderr_tail"),
            exit_code=o.opt_integer("exit_code"),
            reward_error=o.opt_string("reward_error"),
            cleanup_error=o.opt_string("cleanup_error"),
            rewards=o.number_map("rewards"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class LaunchEntry:
    """One launch of a rollout's harness."""

    launch_id: str
    attempt: int
    sandbox: str
    resumed: bool
    reason: str
    started_at_ms: int
    ended_at_ms: int | None = None
    exit_code: int | None = None
    end: str | None = None
    note: str | None = None
    paused_ms: int = 0
    pauses: int = 0
    tier: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> LaunchEntry:
        return LaunchEntry(
            launch_id=o.string("launch_id"),
            attempt=o.integer("attempt"),
            sandbox=o.string("sandbox"),
            resumed=o.boolean("resumed"),
            reason=o.string("reason"),
            started_at_ms=o.integer("started_at_ms"),
            ended_at_ms=o.opt_integer("ended_at_ms"),
            exit_code=o.opt_integer("exit_code"),
            end=o.opt_string("end"),
            note=o.opt_string("note"),
            paused_ms=o.integer("paused_ms", 0),
            pauses=o.integer("pauses", 0),
            tier=o.opt_string("tier"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class Usage:
    """Model usage the adapter collected from the harness."""

    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> Usage:
        return Usage(
            model_calls=o.integer("model_calls"),
            prompt_tokens=o.integer("prompt_tokens"),
            completion_tokens=o.integer("completion_tokens"),
            total_tokens=o.integer("total_tokens"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class ResourceUsage:
    """What a rollout's sandbox used, and the limits that stopped something in it."""

    cpu_ms: int
    disk_bytes: int
    net_bytes_in: int
    net_bytes_out: int
    net_connections: int
    memory_peak_bytes: int | None = None
    limits_hit: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> ResourceUsage:
        return ResourceUsage(
            cpu_ms=o.integer("cpu_ms"),
            disk_bytes=o.integer("disk_bytes"),
            net_bytes_in=o.integer("net_bytes_in"),
            net_bytes_out=o.integer("net_bytes_out"),
            net_connections=o.integer("net_connections"),
            memory_peak_bytes=o.opt_integer("memory_peak_bytes"),
            limits_hit=o.strings("limits_hit", required=False),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class RolloutTimings:
    """When the rollout ran, Unix milliseconds."""

    started_at_ms: int
    ended_at_ms: int
    harness_ms: int
    paused_ms: int
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> RolloutTimings:
        return RolloutTimings(
            started_at_ms=o.integer("started_at_ms"),
            ended_at_ms=o.integer("ended_at_ms"),
            harness_ms=o.integer("harness_ms"),
            paused_ms=o.integer("paused_ms"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class TranscriptEntry:
    """One message of a harness's conversation."""

    role: str
    text: str = ""
    tool_calls: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> TranscriptEntry:
        return TranscriptEntry(
            role=o.string("role"),
            text=o.opt_string("text") or "",
            tool_calls=o.strings("tool_calls", required=False),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class ForkedFrom:
    """The saved state a branch of a forked rollout started from."""

    rollout: str
    checkpoint: str
    call: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> ForkedFrom:
        return ForkedFrom(
            rollout=o.string("rollout"),
            checkpoint=o.string("checkpoint"),
            call=o.opt_string("call"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class RolloutResult:
    """One rollout's result (RolloutResult v2; v1 is read too)."""

    task_id: str
    rollout: str
    attempt: int
    status: str
    restart: bool
    launches: tuple[LaunchEntry, ...]
    timings: RolloutTimings
    verdict: Verdict | None = None
    reward: float | None = None
    error: str | None = None
    usage: Usage | None = None
    resources: ResourceUsage | None = None
    response: str | None = None
    transcript: tuple[TranscriptEntry, ...] = ()
    forked_from: ForkedFrom | None = None
    infra_class: str | None = None
    infra_retries: tuple[str, ...] = ()
    group: str | None = None
    v: int = 2
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return attempt_key(self.rollout, self.attempt)

    @property
    def infra_error(self) -> bool:
        """The infrastructure ended it: it has no reward and is no sample of the policy."""
        return self.status in ("infra_error", "failed")

    @property
    def passed(self) -> bool | None:
        """The verdict's ``passed``; None without a verdict."""
        return None if self.verdict is None else self.verdict.passed

    @staticmethod
    def from_dict(value: object) -> RolloutResult:
        """A result from its JSON object (a reply, or a row of a run's ``results.jsonl``)."""
        return read(value, "rollout result", RolloutResult.parse)

    @staticmethod
    def parse(o: Obj) -> RolloutResult:
        v = o.version("rollout result", RESULT_VERSIONS)
        status = o.string("status")
        infra_class = o.opt_string("infra_class")
        if v == 1 and status == "failed":
            # Version 1 said `failed` for what version 2 calls an infrastructure error.
            status, infra_class = "infra_error", infra_class or "unclassified"
        return RolloutResult(
            task_id=o.string("task_id"),
            rollout=o.string("rollout"),
            attempt=o.integer("attempt"),
            status=status,
            restart=o.boolean("restart"),
            launches=o.array("launches", LaunchEntry.parse),
            timings=o.child("timings", RolloutTimings.parse),
            verdict=o.opt_child("verdict", Verdict.parse),
            reward=o.opt_number("reward"),
            error=o.opt_string("error"),
            usage=o.opt_child("usage", Usage.parse),
            resources=o.opt_child("resources", ResourceUsage.parse),
            response=o.opt_string("response"),
            transcript=o.array("transcript", TranscriptEntry.parse, required=False),
            forked_from=o.opt_child("forked_from", ForkedFrom.parse),
            infra_class=infra_class,
            infra_retries=o.strings("infra_retries", required=False),
            group=o.opt_string("group"),
            v=v,
            extra=o.extra(),
        )


def rollout_answer(value: object, path: str) -> RolloutResult | RolloutStatus:
    """``GET /v1/rollouts/{id}``: the result once done (it has ``status``), else the status."""
    if isinstance(value, dict) and "status" in value and "state" not in value:
        return read(value, path, RolloutResult.parse)
    return read(value, path, RolloutStatus.parse)


def rollout_list(o: Obj) -> tuple[RolloutStatus, ...]:
    o.version("rollout list")
    return o.array("rollouts", RolloutStatus.parse)


@dataclass(frozen=True)
class PhaseTimings:
    """How long each step of a checkpoint took, in milliseconds."""

    prepare_ms: int
    commit_ms: int
    publish_ms: int
    resume_ms: int
    total_ms: int
    held_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> PhaseTimings:
        return PhaseTimings(
            prepare_ms=o.integer("prepare_ms"),
            commit_ms=o.integer("commit_ms"),
            publish_ms=o.integer("publish_ms"),
            resume_ms=o.integer("resume_ms"),
            total_ms=o.integer("total_ms"),
            held_ms=o.integer("held_ms", 0),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class MemberRecords:
    """One participant's share of a checkpoint."""

    kind: str
    instance: str
    record_count: int
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> MemberRecords:
        return MemberRecords(
            kind=o.string("kind"),
            instance=o.string("instance"),
            record_count=o.integer("record_count"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class CheckpointReply:
    """A published checkpoint (``POST /v1/coordinator/checkpoint``)."""

    id: str
    scope: tuple[str, ...]
    restarts: tuple[str, ...]
    timings: PhaseTimings
    participants: tuple[MemberRecords, ...]
    pruned: tuple[str, ...]
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def record_count(self, kind: str) -> int | None:
        """Records the participants of ``kind`` wrote, summed; None when none took part."""
        counts = [p.record_count for p in self.participants if p.kind == kind]
        return sum(counts) if counts else None

    @staticmethod
    def parse(o: Obj) -> CheckpointReply:
        v = o.version("checkpoint reply")
        return CheckpointReply(
            id=o.string("id"),
            scope=o.strings("scope"),
            restarts=o.strings("restarts"),
            timings=o.child("timings", PhaseTimings.parse),
            participants=o.array("participants", MemberRecords.parse),
            pruned=o.strings("pruned"),
            v=v,
            extra=o.extra(),
        )


@dataclass(frozen=True)
class Move:
    """A lost participant's share taken over by a live one of the same kind.

    ``kind`` is ``"agent"`` or ``"resources"``; ``lost`` is the instance that is gone
    (its node died), ``to`` the live instance that continues its rollouts.
    """

    kind: str
    lost: str
    to: str

    def body(self) -> dict[str, str]:
        return {"kind": self.kind, "from": self.lost, "to": self.to}


@dataclass(frozen=True)
class RestoredMember:
    """The next attempts one participant installed."""

    kind: str
    instance: str
    keys: tuple[str, ...]
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> RestoredMember:
        return RestoredMember(
            kind=o.string("kind"),
            instance=o.string("instance"),
            keys=o.strings("keys"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class RestoreReply:
    """A restore done and resumed everywhere (``POST /v1/coordinator/restore``)."""

    id: str
    source: str
    restored: tuple[RestoredMember, ...]
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> RestoreReply:
        v = o.version("restore reply")
        return RestoreReply(
            id=o.string("id"),
            source=o.string("source"),
            restored=o.array("restored", RestoredMember.parse),
            v=v,
            extra=o.extra(),
        )


@dataclass(frozen=True)
class ForkReply:
    """The branches of a fork, running (``POST /v1/coordinator/fork``)."""

    checkpoint: str
    rollout: str
    # The wire's `from`: the attempt key the checkpoint saved, every branch's start.
    source: str
    branches: tuple[str, ...]
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> ForkReply:
        v = o.version("fork reply")
        return ForkReply(
            checkpoint=o.string("checkpoint"),
            rollout=o.string("rollout"),
            source=o.string("from"),
            branches=o.strings("branches"),
            v=v,
            extra=o.extra(),
        )


@dataclass(frozen=True)
class PeerStatus:
    """One participant as the coordinator sees it."""

    kind: str
    instance: str
    url: str
    phase: str | None = None
    checkpoint: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> PeerStatus:
        return PeerStatus(
            kind=o.string("kind"),
            instance=o.string("instance"),
            url=o.string("url"),
            phase=o.opt_string("phase"),
            checkpoint=o.opt_string("checkpoint"),
            error=o.opt_string("error"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class CoordinatorStatus:
    """``GET /v1/coordinator/status``."""

    busy: bool
    peers: tuple[PeerStatus, ...]
    latest: str | None = None
    continues: str | None = None
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> CoordinatorStatus:
        v = o.version("coordinator status")
        return CoordinatorStatus(
            busy=o.boolean("busy"),
            peers=o.array("peers", PeerStatus.parse),
            latest=o.opt_string("latest"),
            continues=o.opt_string("continues"),
            v=v,
            extra=o.extra(),
        )


@dataclass(frozen=True)
class RunStatus:
    """``GET /v1/run/status`` of ``rollpoint run --listen``."""

    total: int
    done: int
    in_flight: int
    queued: int
    parked: int
    checkpoints: int
    last_checkpoint: str | None = None
    last_checkpoint_ms: int | None = None
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> RunStatus:
        v = o.version("run status")
        return RunStatus(
            total=o.integer("total"),
            done=o.integer("done"),
            in_flight=o.integer("in_flight"),
            queued=o.integer("queued"),
            parked=o.integer("parked"),
            checkpoints=o.integer("checkpoints"),
            last_checkpoint=o.opt_string("last_checkpoint"),
            last_checkpoint_ms=o.opt_integer("last_checkpoint_ms"),
            v=v,
            extra=o.extra(),
        )


# What a fleet pause does to model calls generating when it begins.
IN_FLIGHT_CALLS = ("finish", "abort")


@dataclass(frozen=True)
class FleetReport:
    """The fleet after ``POST /v1/fleet/pause`` or ``/v1/fleet/continue``."""

    paused: bool
    # While paused: what calls generating at the pause do (``finish`` or ``abort``).
    calls: str | None
    # The policy version model calls are tagged with.
    version: str | None
    # Rollouts paused in place (or held before they start).
    parked: int
    # Rollouts that go on while paused (their model calls are held all the same).
    going_on: tuple[str, ...]
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> FleetReport:
        v = o.version("fleet report")
        calls = o.opt_string("calls")
        if calls is not None and calls not in IN_FLIGHT_CALLS:
            raise ProtocolError(f"{o.path}.calls: {calls!r} is not one of {IN_FLIGHT_CALLS}")
        return FleetReport(
            paused=o.boolean("paused"),
            calls=calls,
            version=o.opt_string("version"),
            parked=o.integer("parked"),
            going_on=o.strings("going_on"),
            v=v,
            extra=o.extra(),
        )
