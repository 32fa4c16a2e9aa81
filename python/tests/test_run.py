"""The clients against a real ``rollpoint run --listen`` (root).

A tasks file (three counting tasks and a native-worker task against the
run's scripted model) and a config are written to a temporary directory and
run with the control endpoint on. While they run: ``Client.from_run_dir``,
the run's status, a checkpoint, a fork, a pause for a weight update and the
refusals; then the run ends on its own with a verified row for every task and
the branch.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import (
    LIMIT_S,
    TOKEN,
    Binaries,
    Services,
    counting_task,
    end_run,
    model_script,
    native_task,
    remove_tree,
    short_tmpdir,
    wait_control,
    write_secret,
)

import rollpoint
from rollpoint import AsyncClient, BadRequest, Client, Unauthorized

COUNTING = ["count-0", "count-1", "count-2"]
NATIVE = "native-0"
# Long enough for the checks below to run while every task is in flight.
RUN_LINES = 40


@dataclass
class LiveRun:
    dir: Path
    run_dir: Path
    token_file: Path
    services: Services
    child: subprocess.Popen[bytes]

    def wait_exit(self) -> int:
        try:
            return self.child.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not end within {LIMIT_S} s:\n{self.services.log('run')}")


@pytest.fixture(scope="module")
def live_run(bins: Binaries) -> Iterator[LiveRun]:
    base = short_tmpdir("rpr")
    tasks = [counting_task(i, lines=RUN_LINES) for i in COUNTING]
    tasks.append(native_task(NATIVE, bins.worker))
    (base / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    model_script(base / "model.json")
    (base / "run.toml").write_text(
        "v = 1\n"
        "concurrency = 8\n"
        "checkpoint_every_s = 0\n"
        "keep = 3\n"
        'model_script = "model.json"\n'
        'store = "copy"\n'
        f'supervisor = "{bins.supervisor}"\n'
    )
    token = write_secret(base / "token", TOKEN)
    logs = base / "logs"
    logs.mkdir()
    run_dir = base / "run"
    services = Services(bins, logs)
    child = services.spawn(
        "run",
        [
            "run",
            base / "tasks.jsonl",
            "--config",
            base / "run.toml",
            "--run-dir",
            run_dir,
            "--listen",
            "127.0.0.1:0",
            "--control-token-file",
            token,
        ],
    )
    try:
        wait_control(run_dir, child, services, "run")
        yield LiveRun(base, run_dir, token, services, child)
    finally:
        end_run(bins, child, run_dir)
        remove_tree(base)


def test_a_live_run_is_driven_from_its_run_dir(live_run: LiveRun) -> None:
    c = Client.from_run_dir(live_run.run_dir, token_file=live_run.token_file)
    control = json.loads((live_run.run_dir / "control.json").read_text())
    assert c.base_url == f"http://{control['addr']}"

    st = c.run_status()
    assert st.v == 1
    assert st.total == 4, st
    assert st.done == 0, st
    assert st.checkpoints == 0
    assert st.last_checkpoint is None

    # Wait until every task is running, then checkpoint: all four are in it.
    end = time.monotonic() + LIMIT_S
    while c.run_status().in_flight < 4:
        assert time.monotonic() < end, c.run_status()
        time.sleep(0.2)
    time.sleep(1.0)
    ck = c.checkpoint()
    assert sorted(ck.scope) == sorted([*COUNTING, NATIVE]), ck
    assert ck.restarts == ()
    assert ck.record_count("agent") == 4, ck
    assert ck.record_count("resources") == 4, ck
    latest = (live_run.run_dir / "checkpoints" / "LATEST").read_text().strip()
    assert latest == ck.id

    st = c.run_status()
    assert st.checkpoints == 1, st
    assert st.last_checkpoint == ck.id, st
    assert st.last_checkpoint_ms is not None

    fork = c.fork(ck.id, COUNTING[0], n=1)
    assert fork.branches == (f"{COUNTING[0]}~1",), fork
    assert fork.source == COUNTING[0]

    # A weight update: every rollout paused in place, then on under version 2.
    paused = c.pause_for_update()
    assert paused.paused, paused
    assert paused.calls == "finish", paused
    assert paused.going_on == (), paused
    assert paused.parked >= 4, paused
    resumed = c.continue_after_update("2")
    assert not resumed.paused, resumed
    assert resumed.version == "2", resumed
    with pytest.raises(BadRequest) as e:
        c.continue_after_update("two words")
    assert e.value.field == "version", e.value
    with pytest.raises(ValueError, match="calls"):
        c.pause_for_update("later")

    # The run's endpoint covers every rollout: a scope is refused by name.
    with pytest.raises(BadRequest) as e:
        c.checkpoint(scope=[COUNTING[0]])
    assert e.value.field == "scope", e.value
    with pytest.raises(BadRequest) as e:
        c.checkpoint(hold_ms=900_000)
    assert e.value.field == "hold_ms"
    with pytest.raises(Unauthorized):
        Client.from_run_dir(live_run.run_dir, token="wrong").run_status()

    async def from_async() -> rollpoint.RunStatus:
        async with AsyncClient.from_run_dir(live_run.run_dir, token=TOKEN) as a:
            return await a.run_status()

    st = asyncio.run(from_async())
    assert st.total == 5, "the branch is a rollout of the run"
    assert st.checkpoints >= 2, "a fork is pinned by a checkpoint at once"

    # The run ends on its own once every rollout has its row.
    assert live_run.wait_exit() == 0, live_run.services.log("run")
    assert not (live_run.run_dir / "control.json").exists()
    rows = [
        json.loads(line)
        for line in (live_run.run_dir / "results.jsonl").read_text().splitlines()
        if line.strip()
    ]
    by_id = {r["rollout"]: r for r in rows}
    assert sorted(by_id) == sorted([*COUNTING, NATIVE, fork.branches[0]]), by_id
    for row in rows:
        r = rollpoint.RolloutResult.from_dict(row)
        assert r.status == "verified", r
        assert r.passed, r
    with pytest.raises(rollpoint.RollpointError, match=r"control\.json"):
        Client.from_run_dir(live_run.run_dir, token=TOKEN)
