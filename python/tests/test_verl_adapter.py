"""The verl adapter against verl's documented shapes (verl itself is not installed).

verl's ``AgentLoopBase`` is built with keyword arguments of its own and has
``async run(sampling_params, **kwargs) -> AgentLoopOutput``; the output's
fields and ``AgentLoopMetrics``' are listed below as verl documents them.
``run`` is driven against a small fake agent in the test (the real agent's
trajectory route is in test_trajectories_live.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from typing import Any

import pytest
from support import counting_task, document
from test_http import Request, reply, serving

from rollpoint import AsyncClient, RollpointError, Trajectory, TrajectoryNotTrainable
from rollpoint.adapters.verl import AgentLoopOutput, RollpointAgentLoop, output_from

# verl.experimental.agent_loop.AgentLoopOutput's fields a text agent loop fills.
VERL_OUTPUT_FIELDS = {
    "prompt_ids",
    "response_ids",
    "response_mask",
    "response_logprobs",
    "reward_score",
    "num_turns",
    "metrics",
    "extra_fields",
}
VERL_METRICS_FIELDS = {"generate_sequences", "tool_calls"}


def test_the_output_has_verls_fields_and_run_its_signature() -> None:
    names = {f.name for f in dataclasses.fields(AgentLoopOutput)}
    assert names == VERL_OUTPUT_FIELDS
    assert inspect.iscoroutinefunction(RollpointAgentLoop.run)
    params = inspect.signature(RollpointAgentLoop.run).parameters
    assert list(params)[:2] == ["self", "sampling_params"]
    assert params["kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    # verl's own constructor arguments are accepted.
    loop = RollpointAgentLoop(
        trainer_config=object(),
        server_manager=object(),
        tokenizer=object(),
        processor=None,
        agent_url="http://127.0.0.1:1",
    )
    assert set(loop.verl_kwargs) == {"trainer_config", "server_manager", "tokenizer", "processor"}


def test_a_trajectory_becomes_prompt_and_masked_response() -> None:
    out = output_from(Trajectory.from_dict(document()))
    assert out.prompt_ids == [1, 2, 3]
    assert out.response_ids == [4, 5, 6, 7, 8]
    assert out.response_mask == [1, 1, 0, 0, 1]
    assert out.response_logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0]
    assert len(out.response_logprobs) == len(out.response_ids) == len(out.response_mask)
    assert out.reward_score == 1.0
    # The user's message, two model calls and one tool result.
    assert out.num_turns == 4
    assert set(out.metrics) == VERL_METRICS_FIELDS
    assert out.metrics["generate_sequences"] == pytest.approx(0.024)
    assert out.extra_fields["rollout"] == "r-1"


def test_untrainable_or_split_trajectories_are_refused() -> None:
    nt = {"reason": "missing_tokens", "call_id": "call-0", "message": "no tokens"}
    with pytest.raises(TrajectoryNotTrainable):
        output_from(Trajectory.from_dict(document(trainable=False, not_trainable=nt)))
    doc = document()
    doc["segments"].append({**doc["segments"][0], "first_call": 1})
    doc["token_breaks"] = [{"call_index": 1, "call_id": "call-1", "position": 2}]
    with pytest.raises(RollpointError, match="2 segments"):
        output_from(Trajectory.from_dict(doc))


def test_run_posts_the_rows_task_under_a_fresh_id_and_reads_its_trajectory() -> None:
    async def agent(req: Request, w: asyncio.StreamWriter) -> bool:
        if req.method == "POST" and req.target == "/v1/rollouts":
            rid = json.loads(req.body)["id"]
            status = {"v": 1, "rollout": rid, "attempt": 0, "state": "queued"}
            w.write(reply("202 Accepted", json.dumps(status).encode()))
        elif "/result?wait_ms=" in req.target:
            rid = req.target.split("/")[3]
            w.write(reply("200 OK", json.dumps(result_of(rid)).encode()))
        elif req.target.endswith("/trajectory"):
            rid = req.target.split("/")[3]
            w.write(reply("200 OK", json.dumps(document(rollout=rid)).encode()))
        else:
            w.write(reply("404 Not Found", b""))
        await w.drain()
        return True

    async def main() -> list[AgentLoopOutput]:
        async with serving(agent) as s, AsyncClient(s.url, token="t") as c:
            loop = RollpointAgentLoop(client=c, timeout=10)
            row: dict[str, Any] = {"rollpoint_task": counting_task("fix-1"), "index": 0}
            outs = await asyncio.gather(*(loop.run({"temperature": 1.0}, **row) for _ in range(3)))
            posted = [json.loads(r.body)["id"] for r in s.requests if r.method == "POST"]
            assert len(set(posted)) == 3, posted
            assert all(p.startswith("fix-1.") for p in posted)
            assert "id" not in row["rollpoint_task"], "the row's task is left as it was"
            with pytest.raises(RollpointError, match="rollpoint_task"):
                await loop.run({}, index=1)
            return list(outs)

    outs = asyncio.run(main())
    assert all(o.response_mask == [1, 1, 0, 0, 1] for o in outs)
    assert len({o.extra_fields["rollout"] for o in outs}) == 3


def result_of(rid: str) -> dict[str, Any]:
    return {
        "v": 1,
        "task_id": "fix-1",
        "rollout": rid,
        "attempt": 0,
        "status": "verified",
        "restart": False,
        "launches": [],
        "reward": 1.0,
        "timings": {"started_at_ms": 1, "ended_at_ms": 2, "harness_ms": 1000, "paused_ms": 0},
    }
