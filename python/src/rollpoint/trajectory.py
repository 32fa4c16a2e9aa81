"""Trajectories: what a trainer learns from.

A trajectory document (v1) is what the agent's
``GET /v1/rollouts/{id}/trajectory`` returns and what
``rollpoint export RUN_DIR --format jsonl`` writes one per line: the
rollout's model calls in lineage order with their token ids and logprobs,
where the token stream broke, and the token segments to train on with their
loss masks. A trajectory the exporter could not make whole says why in
``not_trainable``; ``to_numpy`` refuses it unless asked not to, so a broken
stream never reaches a gradient by accident.

numpy is optional: it is imported only by ``to_numpy``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._parse import Obj, read
from .errors import ProtocolError, RollpointError, TrajectoryNotTrainable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

# Why a trajectory is not trainable (`not_trainable.reason`).
NOT_TRAINABLE_REASONS = (
    "token_break",
    "missing_tokens",
    "capture_error",
    "unanswered_call",
    "unresolved_lineage",
    "no_calls",
    "not_finished",
    "infra_error",
    "policy_versions",
)


@dataclass(frozen=True)
class NotTrainable:
    """Why the exporter did not make a trainable trajectory."""

    reason: str
    message: str
    call_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> NotTrainable:
        return NotTrainable(
            reason=o.string("reason"),
            message=o.string("message"),
            call_id=o.opt_string("call_id"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class ModelCall:
    """One model call of the rollout's chain, with the tokens the gateway captured."""

    call_id: str
    # `chat` or `responses`.
    route: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    # One per completion id; None when the upstream gave none.
    logprobs: tuple[float, ...] | None
    model: str | None = None
    finish_reason: str | None = None
    # The call of an earlier attempt whose reply this one replayed.
    replayed_from: str | None = None
    latency_ms: int | None = None
    # The version of the weights that answered it, when known.
    policy_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> ModelCall:
        c = ModelCall(
            call_id=o.string("call_id"),
            route=o.string("route"),
            prompt_ids=o.integers("prompt_ids"),
            completion_ids=o.integers("completion_ids"),
            logprobs=o.opt_numbers("logprobs"),
            model=o.opt_string("model"),
            finish_reason=o.opt_string("finish_reason"),
            replayed_from=o.opt_string("replayed_from"),
            latency_ms=o.opt_integer("latency_ms"),
            policy_version=o.opt_string("policy_version"),
            extra=o.extra(),
        )
        if c.logprobs is not None and len(c.logprobs) != len(c.completion_ids):
            raise ProtocolError(
                f"{o.path}.logprobs: {len(c.logprobs)} for {len(c.completion_ids)} completion ids"
            )
        return c


@dataclass(frozen=True)
class TokenBreak:
    """A call whose prompt does not extend the tokens before it."""

    call_index: int
    call_id: str
    # The first token position where the prompt and the prefix differ.
    position: int
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> TokenBreak:
        return TokenBreak(
            call_index=o.integer("call_index"),
            call_id=o.string("call_id"),
            position=o.integer("position"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class Segment:
    """Calls from ``first_call`` on, joined into one token sequence without a break.

    ``loss_mask`` is 1 on model-generated tokens and 0 on everything the harness
    added; ``logprobs`` has one entry per token (the model's on generated
    tokens, 0 elsewhere), or is None when a call of the segment has none.
    """

    first_call: int
    tokens: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    # The policy versions that answered its calls, in order of first use.
    policy_versions: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> Segment:
        seg = Segment(
            first_call=o.integer("first_call"),
            tokens=o.integers("tokens"),
            loss_mask=o.integers("loss_mask"),
            logprobs=o.opt_numbers("logprobs"),
            policy_versions=o.strings("policy_versions", required=False),
            extra=o.extra(),
        )
        if seg.logprobs is not None and len(seg.logprobs) != len(seg.tokens):
            raise ProtocolError(
                f"{o.path}.logprobs: {len(seg.logprobs)} entries for {len(seg.tokens)} tokens"
            )
        if len(seg.loss_mask) != len(seg.tokens):
            raise ProtocolError(
                f"{o.path}.loss_mask: {len(seg.loss_mask)} entries for {len(seg.tokens)} tokens"
            )
        if any(m not in (0, 1) for m in seg.loss_mask):
            raise ProtocolError(f"{o.path}.loss_mask: entries must be 0 or 1")
        return seg


@dataclass(frozen=True)
class TrajectoryMetrics:
    """Counts of the rollout the trajectory came from."""

    turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    model_latency_ms: int
    paused_ms: int
    launches: int
    checkpoints: int
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> TrajectoryMetrics:
        return TrajectoryMetrics(
            turns=o.integer("turns"),
            tool_calls=o.integer("tool_calls"),
            prompt_tokens=o.integer("prompt_tokens"),
            completion_tokens=o.integer("completion_tokens"),
            model_latency_ms=o.integer("model_latency_ms"),
            paused_ms=o.integer("paused_ms"),
            launches=o.integer("launches"),
            checkpoints=o.integer("checkpoints"),
            extra=o.extra(),
        )


@dataclass(frozen=True)
class NumpySegment:
    """A segment as arrays: tokens int64, loss_mask int8 (0/1), logprobs float32
    (None when the segment has none), all of one length."""

    first_call: int
    tokens: NDArray[np.int64]
    loss_mask: NDArray[np.int8]
    logprobs: NDArray[np.float32] | None


@dataclass(frozen=True)
class Trajectory:
    """A trajectory document (v1)."""

    rollout: str
    attempt: int
    trainable: bool
    calls: tuple[ModelCall, ...]
    token_breaks: tuple[TokenBreak, ...]
    segments: tuple[Segment, ...]
    metrics: TrajectoryMetrics
    not_trainable: NotTrainable | None = None
    reward: float | None = None
    passed: bool | None = None
    group: str | None = None
    infra_class: str | None = None
    v: int = 1
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @staticmethod
    def parse(o: Obj) -> Trajectory:
        v = o.version("trajectory")
        t = Trajectory(
            rollout=o.string("rollout"),
            attempt=o.integer("attempt"),
            trainable=o.boolean("trainable"),
            not_trainable=o.opt_child("not_trainable", NotTrainable.parse),
            reward=o.opt_number("reward"),
            passed=o.opt_boolean("passed"),
            group=o.opt_string("group"),
            infra_class=o.opt_string("infra_class"),
            calls=o.array("calls", ModelCall.parse),
            token_breaks=o.array("token_breaks", TokenBreak.parse),
            segments=o.array("segments", Segment.parse),
            metrics=o.child("metrics", TrajectoryMetrics.parse),
            v=v,
            extra=o.extra(),
        )
        if not t.trainable and t.not_trainable is None:
            raise ProtocolError("trajectory.not_trainable: missing for a trajectory not trainable")
        return t

    @staticmethod
    def from_dict(value: object) -> Trajectory:
        return read(value, "trajectory", Trajectory.parse)

    @staticmethod
    def from_json(text: str | bytes) -> Trajectory:
        try:
            value = json.loads(text)
        except ValueError as e:
            raise ProtocolError(f"trajectory: not JSON: {e}") from None
        return Trajectory.from_dict(value)

    def to_numpy(self, *, allow_untrainable: bool = False) -> list[NumpySegment]:
        """Each segment as numpy arrays.

        Raises TrajectoryNotTrainable for a trajectory marked not trainable,
        unless ``allow_untrainable`` (its segments are then as exported).
        """
        if not self.trainable and not allow_untrainable:
            nt = self.not_trainable
            raise TrajectoryNotTrainable(
                self.rollout,
                nt.reason if nt else "unknown",
                nt.call_id if nt else None,
                nt.message if nt else "",
            )
        np = _numpy()
        return [
            NumpySegment(
                first_call=s.first_call,
                tokens=np.asarray(s.tokens, dtype=np.int64),
                loss_mask=np.asarray(s.loss_mask, dtype=np.int8),
                logprobs=None if s.logprobs is None else np.asarray(s.logprobs, dtype=np.float32),
            )
            for s in self.segments
        ]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise RollpointError(
            "Trajectory.to_numpy needs numpy: pip install 'rollpoint[numpy]'"
        ) from None
    return numpy


def iter_trajectories(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """The trajectories of a JSONL file, one document a line, read as they are needed.

    An error names the file and the line.
    """
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                raise ProtocolError(f"{path}:{n}: not JSON: {e}") from None
            try:
                yield read(value, "trajectory", Trajectory.parse)
            except ProtocolError as e:
                # Same type (UnsupportedVersion stays one), with the place.
                e.args = (f"{path}:{n}: {e}",)
                raise


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Every trajectory of a JSONL file ``rollpoint export --format jsonl`` wrote."""
    return list(iter_trajectories(path))
