"""A rollpoint rollout as a verl agent loop.

verl drives multi-turn rollouts through agent loops: an object whose
``async run(sampling_params, **kwargs)`` returns an ``AgentLoopOutput``
(``prompt_ids``, ``response_ids``, ``response_mask`` with 1 on
model-generated tokens, ``response_logprobs``, ``reward_score``,
``num_turns``, ``metrics``). ``RollpointAgentLoop`` has that shape: each
``run`` posts the task the dataset row carries to a ``rollpoint serve
agent``, awaits its result and turns its trajectory into that output, so the
harness runs in a checkpointable sandbox while verl keeps its own loop.

verl is not a dependency and is not imported: it cannot be installed
offline where this package is tested, so this adapter is tested against
verl's documented shapes only. The output is a plain dataclass with verl's
field names; ``metrics`` is a dict, which verl's pydantic model accepts
(``verl.experimental.agent_loop.AgentLoopOutput(**dataclasses.asdict(out))``).
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..client import AsyncClient
from ..errors import RollpointError, TrajectoryNotTrainable
from ..trajectory import Trajectory
from ..wire import RolloutResult

# The dataset row's field holding the rollout task (RolloutTask v1).
TASK_FIELD = "rollpoint_task"


@dataclass(frozen=True)
class AgentLoopOutput:
    """verl's ``AgentLoopOutput`` fields, filled from one trajectory."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    reward_score: float | None
    num_turns: int
    # verl's AgentLoopMetrics: seconds generating and in tools.
    metrics: dict[str, float]
    extra_fields: dict[str, Any] = field(default_factory=dict)


def output_from(traj: Trajectory, result: RolloutResult | None = None) -> AgentLoopOutput:
    """verl's output for a trainable trajectory of one segment.

    The prompt is the tokens before the first model-generated one; everything
    after is the response, tool results masked 0. A trajectory that is not
    trainable, or that a token break split in several segments (verl's
    output holds one sequence), is refused.
    """
    if not traj.trainable:
        nt = traj.not_trainable
        raise TrajectoryNotTrainable(
            traj.rollout,
            nt.reason if nt else "unknown",
            nt.call_id if nt else None,
            nt.message if nt else "",
        )
    if len(traj.segments) != 1:
        at = ", ".join(str(b.call_index) for b in traj.token_breaks)
        raise RollpointError(
            f"trajectory of {traj.rollout} has {len(traj.segments)} segments (token breaks at "
            f"calls {at or 'none'}); a verl agent loop output holds one"
        )
    seg = traj.segments[0]
    first = next((i for i, m in enumerate(seg.loss_mask) if m == 1), len(seg.tokens))
    model_s = traj.metrics.model_latency_ms / 1000
    tools_s = 0.0
    if result is not None:
        busy_ms = result.timings.harness_ms - result.timings.paused_ms
        tools_s = max(0.0, busy_ms / 1000 - model_s)
    return AgentLoopOutput(
        prompt_ids=list(seg.tokens[:first]),
        response_ids=list(seg.tokens[first:]),
        response_mask=list(seg.loss_mask[first:]),
        response_logprobs=None if seg.logprobs is None else list(seg.logprobs[first:]),
        reward_score=traj.reward,
        # verl counts messages: the user's, one per model call, one per tool result.
        num_turns=1 + traj.metrics.turns + traj.metrics.tool_calls,
        metrics={"generate_sequences": model_s, "tool_calls": tools_s},
        extra_fields={"rollout": traj.rollout, "attempt": traj.attempt, "passed": traj.passed},
    )


class RollpointAgentLoop:
    """A verl-shaped agent loop running each sample as a rollpoint rollout.

    verl constructs agent loops with its own arguments (trainer config,
    server manager, tokenizer, ...); they are accepted and not used, since
    the harness reaches its model through rollpoint's gateway. The agent is
    ``client``, else ``agent_url`` and ``token_file``, else the environment's
    ``ROLLPOINT_AGENT_URL`` and ``ROLLPOINT_TOKEN_FILE``.
    """

    def __init__(
        self,
        *args: Any,
        client: AsyncClient | None = None,
        agent_url: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        task_field: str = TASK_FIELD,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        self.verl_args = args
        self.verl_kwargs = kwargs
        if client is None:
            url = agent_url or os.environ.get("ROLLPOINT_AGENT_URL")
            if not url:
                raise RollpointError(
                    "RollpointAgentLoop needs the agent: client=, agent_url= or ROLLPOINT_AGENT_URL"
                )
            token_file = token_file or os.environ.get("ROLLPOINT_TOKEN_FILE")
            client = AsyncClient(url, token_file=token_file)
        self.client = client
        self.task_field = task_field
        self.timeout = timeout

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One sample: the row's task as a new rollout, awaited, as verl's output.

        ``sampling_params`` are not sent: the harness's model settings come
        from its task. verl asks for several samples of one row, so each run
        gets a rollout id of its own (the task's id plus a random suffix).
        """
        del sampling_params
        if self.task_field not in kwargs:
            raise RollpointError(f"the dataset row has no {self.task_field!r} field")
        task = _task(kwargs[self.task_field])
        base = task.get("id") or task.get("task", {}).get("id") or "rollout"
        task["id"] = f"{base}.{uuid.uuid4().hex[:12]}"
        ref = await self.client.submit(task)
        result = await self.client.result(ref.id, timeout=self.timeout)
        traj = await self.client.trajectory(ref.id)
        return output_from(traj, result)


def _task(value: object) -> dict[str, Any]:
    if isinstance(value, str | bytes):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise RollpointError("a rollout task is a JSON object (RolloutTask v1)")
    # A copy: the row is verl's, and the id is changed per sample.
    return copy.deepcopy(dict(value))
