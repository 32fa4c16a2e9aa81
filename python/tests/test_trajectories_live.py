"""Trajectories the real binaries produce, read with this package (root).

Two sources: ``GET /v1/rollouts/{id}/trajectory`` of ``rollpoint serve
agent`` in a stack whose scripted model answers in vLLM's token shapes and
whose gateway captures the tokens, and ``rollpoint export RUN_DIR --format
jsonl --out F`` of a finished ``rollpoint run`` with ``model_tokens =
"vllm"``. Each document must hold the format's own invariants: within a
segment, the masked tokens are exactly the completions of its calls with
their logprobs, and each call's prompt is a prefix of the segment.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support import (
    LIMIT_S,
    STEPS,
    TOKEN,
    Binaries,
    ServeStack,
    Services,
    counting_task,
    end_run,
    model_script,
    native_task,
    remove_tree,
    short_tmpdir,
    start_serve_stack,
)

import rollpoint
from rollpoint import AsyncClient, Client, NotFound, Trajectory, TrajectoryNotTrainable
from rollpoint.adapters.verl import AgentLoopOutput, RollpointAgentLoop


@pytest.fixture(scope="module")
def token_stack(bins: Binaries) -> Iterator[ServeStack]:
    s = start_serve_stack(bins, "rpt", tokens=True)
    try:
        yield s
    finally:
        try:
            s.services.stop()
        finally:
            s.services.kill_all()
    remove_tree(s.dir)


def check_trainable(t: Trajectory) -> None:
    """The format's invariants on a trainable trajectory, through ``to_numpy``."""
    assert t.trainable, t.not_trainable
    assert t.not_trainable is None
    arrays = t.to_numpy()
    assert len(arrays) == len(t.segments) >= 1
    starts = [s.first_call for s in t.segments]
    assert starts[0] == 0
    assert starts == sorted(starts)
    assert [b.call_index for b in t.token_breaks] == starts[1:]
    ends = [*starts[1:], len(t.calls)]
    for arr, start, end in zip(arrays, starts, ends, strict=True):
        assert arr.tokens.dtype == np.int64
        assert arr.loss_mask.dtype == np.int8
        assert len(arr.tokens) == len(arr.loss_mask)
        calls = t.calls[start:end]
        tokens = arr.tokens.tolist()
        for c in calls:
            assert tokens[: len(c.prompt_ids)] == list(c.prompt_ids), c.call_id
        written = [tok for c in calls for tok in c.completion_ids]
        assert written, "the model wrote tokens"
        assert arr.tokens[arr.loss_mask == 1].tolist() == written
        if arr.logprobs is not None:
            assert arr.logprobs.dtype == np.float32
            assert len(arr.logprobs) == len(arr.tokens)
            assert all(c.logprobs is not None for c in calls)
            model_lp = [lp for c in calls for lp in (c.logprobs or ())]
            np.testing.assert_allclose(arr.logprobs[arr.loss_mask == 1], model_lp, rtol=1e-6)
            assert not arr.logprobs[arr.loss_mask == 0].any()
    assert t.metrics.turns == len(t.calls)


def test_the_agent_serves_each_rollouts_trajectory(token_stack: ServeStack) -> None:
    """``GET /v1/rollouts/{id}/trajectory`` with the tokens captured (``model-script
    --tokens``, ``serve gateway --model-tokens vllm``): a native rollout's trainable
    trajectory, and a command rollout's, which made no model call."""
    agent = Client(token_stack.agent, token=TOKEN)
    tag = f"tj{os.getpid() % 100000}"
    native = f"{tag}-n"
    plain = f"{tag}-c"
    agent.submit(native_task(native, token_stack.bins.worker))
    agent.submit(counting_task(plain, lines=2))
    result = agent.result(native, timeout=LIMIT_S)
    assert result.status == "verified", result

    t = agent.trajectory(native)
    assert (t.v, t.rollout, t.attempt) == (1, native, result.attempt)
    assert t.reward == result.reward == 1.0
    assert t.passed is True
    # One call per shell step, then the one answered "done".
    assert len(t.calls) >= STEPS, t.calls
    assert all(c.route == "chat" for c in t.calls), [c.route for c in t.calls]
    assert t.metrics.tool_calls >= STEPS, t.metrics
    assert t.metrics.launches >= 1
    check_trainable(t)

    assert agent.result(plain, timeout=LIMIT_S).status == "verified"
    none = agent.trajectory(plain)
    assert none.rollout == plain
    assert none.calls == ()
    assert not none.trainable
    assert none.not_trainable is not None
    assert none.not_trainable.reason == "no_calls", none.not_trainable
    with pytest.raises(TrajectoryNotTrainable) as e:
        none.to_numpy()
    assert e.value.reason == "no_calls"
    with pytest.raises(NotFound) as missing:
        agent.trajectory(f"{tag}-nope")
    assert missing.value.code == "not_found"


@pytest.fixture(scope="module")
def token_run(bins: Binaries) -> Iterator[tuple[Path, Path, Services]]:
    """A finished ``rollpoint run`` of a native task and a counting task, tokens captured."""
    base = short_tmpdir("rpe")
    tasks = [native_task("native-0", bins.worker), counting_task("count-0", lines=4)]
    (base / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    model_script(base / "model.json")
    (base / "run.toml").write_text(
        "v = 1\n"
        "concurrency = 2\n"
        "checkpoint_every_s = 1\n"
        'model_script = "model.json"\n'
        'model_tokens = "vllm"\n'
        'store = "copy"\n'
        f'supervisor = "{bins.supervisor}"\n'
    )
    logs = base / "logs"
    logs.mkdir()
    services = Services(bins, logs)
    run_dir = base / "run"
    child = services.spawn(
        "run", ["run", base / "tasks.jsonl", "--config", base / "run.toml", "--run-dir", run_dir]
    )
    try:
        try:
            code = child.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not end within {LIMIT_S} s:\n{services.log('run')}")
        assert code == 0, services.log("run")
        yield base, run_dir, services
    finally:
        end_run(bins, child, run_dir)
        remove_tree(base)


def test_export_writes_what_read_trajectories_reads(
    token_run: tuple[Path, Path, Services], bins: Binaries
) -> None:
    """``rollpoint export RUN_DIR --format jsonl --out F`` of a run with ``model_tokens``,
    read back and checked against the run's ``results.jsonl``."""
    base, run_dir, _ = token_run
    out = base / "trajectories.jsonl"
    done = subprocess.run(
        [bins.rollpoint, "export", run_dir, "--format", "jsonl", "--out", out],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    trajectories = rollpoint.read_trajectories(out)
    lines = [line for line in out.read_text().splitlines() if line.strip()]
    assert len(trajectories) == len(lines) == 2
    by_id = {t.rollout: t for t in trajectories}
    assert sorted(by_id) == ["count-0", "native-0"]

    rows = {
        r.rollout: r
        for r in (
            rollpoint.RolloutResult.from_dict(json.loads(line))
            for line in (run_dir / "results.jsonl").read_text().splitlines()
            if line.strip()
        )
    }
    for rid, t in by_id.items():
        assert t.attempt == rows[rid].attempt
        assert t.reward == rows[rid].reward
        assert t.passed == rows[rid].passed

    native = by_id["native-0"]
    assert len(native.calls) >= STEPS
    check_trainable(native)
    count = by_id["count-0"]
    assert count.not_trainable is not None
    assert count.not_trainable.reason == "no_calls"
    assert list(rollpoint.iter_trajectories(out)) == trajectories


def test_the_verl_loop_runs_a_rollout_end_to_end(token_stack: ServeStack) -> None:
    """``RollpointAgentLoop.run`` on the real agent: one rollout, as verl's output."""

    async def main() -> AgentLoopOutput:
        async with AsyncClient(token_stack.agent, token=TOKEN) as c:
            loop = RollpointAgentLoop(client=c, timeout=LIMIT_S)
            task = native_task(f"vl{os.getpid() % 100000}", token_stack.bins.worker)
            return await loop.run({"temperature": 1.0}, rollpoint_task=task)

    out = asyncio.run(main())
    assert out.reward_score == 1.0
    assert out.prompt_ids, "the first prompt"
    assert len(out.response_ids) == len(out.response_mask)
    assert out.response_mask[0] == 1, "the response starts with the model's tokens"
    assert sum(out.response_mask) > 0
    if out.response_logprobs is not None:
        assert len(out.response_logprobs) == len(out.response_ids)
    assert out.num_turns > STEPS
