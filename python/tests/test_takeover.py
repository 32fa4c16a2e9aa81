"""A run moved to a machine that has nothing of it, from its checkpoint store alone (root).

``rollpoint run`` with a ``file://`` checkpoint store is killed with everything it started
(the runner, its gateway, its sandboxes) and its run directory deleted: the machine is gone.
``rollpoint resume --from STORE --run-dir NEW`` then continues every rollout from the newest
checkpoint in the store and keeps the results committed before the loss. The processes of
the "new machine" run in a network namespace of their own, so nothing of the old one's
loopback is shared. A second ``resume --from`` while the first drives the run is fenced; an
old holder that comes back (here: SIGSTOP, then SIGCONT) finds its claim taken over and stops.
Then SIGTERM with ``--grace-s``: a stop checkpoint that fits is taken, one that cannot fit is
skipped, one that does not finish in time is abandoned, and the run resumes every time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import LIMIT_S, Binaries, binaries, counting_task, remove_tree, short_tmpdir

LEASE_S = 3
LINES = 40


@pytest.fixture(scope="module")
def bins() -> Binaries:
    return binaries()


@pytest.fixture
def base(bins: Binaries) -> Iterator[Path]:
    path = short_tmpdir("rp-take-")
    yield path
    # A run a failed test left behind: its sandboxes torn down before the directory goes.
    for state in [*path.glob("*/run.json"), *path.glob("*/*/run.json")]:
        command(bins, [bins.rollpoint, "sweep", state.parent])
    remove_tree(path)


def launch_counter(rid: str, lines: int = LINES) -> dict[str, Any]:
    """A counting task (each line once, continued from the file's length)."""
    return counting_task(rid, lines=lines, tick="0.25")


def write_run(base: Path, tasks: list[dict[str, Any]], **config: Any) -> tuple[Path, Path]:
    tasks_file = base / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    settings: dict[str, Any] = {
        "v": 1,
        "concurrency": 8,
        "checkpoint_every_s": 1,
        "keep": 3,
        "store": "copy",
        "checkpoint_store": f"file://{base}/store",
        "store_lease_s": LEASE_S,
    }
    settings.update(config)
    config_file = base / "run.json"
    config_file.write_text(json.dumps(settings))
    return tasks_file, config_file


def env(bins: Binaries) -> dict[str, str]:
    return {
        **os.environ,
        "ROLLPOINT_SUPERVISOR": str(bins.supervisor),
        "ROLLPOINT_WORKER_BIN": str(bins.worker),
        "NO_COLOR": "1",
    }


def elsewhere(argv: list[Any]) -> list[str]:
    """``argv`` in a network namespace of its own: another machine's loopback."""
    return [
        "unshare",
        "--net",
        "sh",
        "-c",
        'ip link set lo up && exec "$@"',
        "sh",
        *(str(a) for a in argv),
    ]


def start(argv: list[Any], bins: Binaries, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen(
        [str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env(bins)
    )


def command(bins: Binaries, argv: list[Any]) -> subprocess.CompletedProcess[bytes]:
    """Runs ``argv`` to its end, output captured."""
    return subprocess.run(
        [str(a) for a in argv],
        env=env(bins),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=LIMIT_S,
        check=False,
    )


def published(store: Path) -> list[str]:
    d = store / "publish"
    return sorted(p.name for p in d.glob("*.json")) if d.is_dir() else []


def wait_for(what: str, check: Any, log: Path, limit: float = LIMIT_S) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}; log:\n{log.read_text()[-4000:]}")


def rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def lose_machine(bins: Binaries, child: subprocess.Popen[bytes], run_dir: Path) -> None:
    """SIGKILL the runner and its gateway, tear its sandboxes down, delete the directory."""
    child.kill()
    child.wait()
    record = run_dir / "gateway" / "process.json"
    if record.exists():
        pid = json.loads(record.read_text())["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    swept = command(bins, [bins.rollpoint, "sweep", run_dir])
    assert swept.returncode == 0, swept.stderr.decode()
    remove_tree(run_dir)
    assert not run_dir.exists(), f"{run_dir} could not be deleted"


def take_over(bins: Binaries, base: Path, new: Path) -> subprocess.Popen[bytes]:
    """``resume --from`` the store into ``new`` on "another machine", once it holds the run's
    claim (its log is ``base/b.log``)."""
    log = base / "b.log"
    child = start(
        elsewhere([bins.rollpoint, "resume", "--from", f"file://{base}/store", "--run-dir", new]),
        bins,
        log,
    )
    wait_for("the takeover", lambda: "holding the run's claim" in log.read_text(), log)
    return child


def every_task_once(run_dir: Path, ids: list[str]) -> dict[str, dict[str, Any]]:
    got = rows(run_dir)
    assert sorted(r["rollout"] for r in got) == sorted(ids), got
    assert all(r["status"] == "verified" for r in got), [
        (r["rollout"], r["status"], r["error"]) for r in got
    ]
    return {r["rollout"]: r for r in got}


def test_a_run_continues_on_a_new_machine_from_the_store_alone(bins: Binaries, base: Path) -> None:
    ids = ["quick", "count-0", "count-1", "count-2"]
    tasks = [launch_counter("quick", lines=2)] + [launch_counter(r) for r in ids[1:]]
    tasks_file, config = write_run(base, tasks)
    old = base / "a"
    a = start(
        [bins.rollpoint, "run", tasks_file, "--config", config, "--run-dir", old],
        bins,
        base / "a.log",
    )
    # A checkpoint published after "quick" finished, then the machine is lost.
    wait_for(
        "quick's result", lambda: any(r["rollout"] == "quick" for r in rows(old)), base / "a.log"
    )
    seen = len(published(base / "store"))
    wait_for(
        "a checkpoint after quick finished",
        lambda: len(published(base / "store")) > seen + 1,
        base / "a.log",
    )
    quick = next(r for r in rows(old) if r["rollout"] == "quick")
    lose_machine(bins, a, old)

    new = base / "b"
    b = take_over(bins, base, new)
    # A second machine while the first drives the run: fenced, and it makes nothing.
    third = base / "c"
    c = command(
        bins,
        elsewhere([bins.rollpoint, "resume", "--from", f"file://{base}/store", "--run-dir", third]),
    )
    err = c.stderr.decode()
    assert c.returncode != 0, err
    assert "fenced" in err, err
    assert "heartbeat moved" in err, err
    assert not (third / "run.json").exists()

    assert b.wait(timeout=LIMIT_S) == 0, (base / "b.log").read_text()[-4000:]
    done = every_task_once(new, ids)
    # Committed before the loss: kept, not run again.
    assert done["quick"] == quick
    resumed = [e for e in events(new) if e["kind"] == "resumed"]
    assert resumed, events(new)
    assert resumed[0]["finished"] >= 1, resumed
    assert resumed[0]["restored"] == 3, resumed
    for rid in ids[1:]:
        launches = done[rid]["launches"]
        # Continued from the snapshot: the old machine's launch, then this one's, in one
        # sandbox lineage; the verify command checks each line is there once.
        assert done[rid]["attempt"] == 1, done[rid]
        assert [entry["attempt"] for entry in launches] == [0, 1], launches
    log = (base / "b.log").read_text()
    assert "taking the run over" in log, log
    assert "restored rollouts from a checkpoint" in log, log


def test_an_old_holder_that_comes_back_is_fenced(bins: Binaries, base: Path) -> None:
    ids = ["count-0", "count-1"]
    tasks_file, config = write_run(base, [launch_counter(r) for r in ids])
    old = base / "a"
    a = start(
        [bins.rollpoint, "run", tasks_file, "--config", config, "--run-dir", old],
        bins,
        base / "a.log",
    )
    wait_for("a checkpoint", lambda: len(published(base / "store")) >= 2, base / "a.log")
    # The old machine stops answering (a partition, a frozen VM); another takes over once
    # its heartbeat has been still for a lease.
    a.send_signal(signal.SIGSTOP)
    new = base / "b"
    b = take_over(bins, base, new)
    a.send_signal(signal.SIGCONT)
    try:
        code = a.wait(timeout=LIMIT_S)
    finally:
        if a.poll() is None:
            a.kill()
    a_log = (base / "a.log").read_text()
    assert code != 0, a_log[-4000:]
    assert "fenced" in a_log, a_log[-4000:]
    assert "taken over" in a_log, a_log[-4000:]
    assert b.wait(timeout=LIMIT_S) == 0, (base / "b.log").read_text()[-4000:]
    every_task_once(new, ids)
    # The old directory may not drive the run again.
    again = command(bins, [bins.rollpoint, "resume", old])
    assert again.returncode != 0, again.stderr.decode()
    assert "taken over" in again.stderr.decode(), again.stderr.decode()
    command(bins, [bins.rollpoint, "sweep", old])


def big_counter(rid: str) -> dict[str, Any]:
    """A counting task whose sandbox holds 64 MiB, so its snapshot (a tar archive in the
    copy store, made while it is frozen) takes over a second."""
    task = launch_counter(rid)
    script = task["adapter"]["argv"][2]
    task["adapter"]["argv"][2] = "[ -f big ] || head -c 67108864 /dev/zero > big; " + script
    return task


def stop_with_grace(
    bins: Binaries, base: Path, name: str, tasks: list[dict[str, Any]], grace_s: int, every_s: int
) -> tuple[Path, str, list[str], list[str]]:
    """Runs, waits for the tasks to be under way, SIGTERMs; returns the run directory, the
    log, and the markers published before and after the signal."""
    tasks_file, config = write_run(base, tasks, checkpoint_every_s=every_s)
    run_dir = base / name
    log = base / f"{name}.log"
    child = start(
        [
            bins.rollpoint,
            "run",
            tasks_file,
            "--config",
            config,
            "--run-dir",
            run_dir,
            "--grace-s",
            grace_s,
        ],
        bins,
        log,
    )
    if every_s:
        wait_for("a checkpoint", lambda: len(published(base / "store")) >= 2, log)
    else:
        wait_for("the launches", lambda: log.read_text().count("launch started") >= len(tasks), log)
        time.sleep(1.5)
    before = published(base / "store")
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    code = child.wait(timeout=LIMIT_S)
    took = time.monotonic() - sent
    text = log.read_text()
    assert code == 75, text[-4000:]
    # Within the grace period and its teardown (sandboxes, the gateway).
    assert took < grace_s + 10, (took, text[-4000:])
    return run_dir, text, before, published(base / "store")


def resume_to_the_end(bins: Binaries, run_dir: Path, ids: list[str], log: Path) -> None:
    done = subprocess.run(
        [bins.rollpoint, "resume", run_dir],
        env=env(bins),
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        timeout=LIMIT_S,
        check=False,
    )
    assert done.returncode == 0, log.read_text()[-4000:]
    every_task_once(run_dir, ids)


def test_sigterm_with_a_grace_period_fits_skips_or_abandons_the_stop_checkpoint(
    bins: Binaries, base: Path
) -> None:
    # Fits: the stop checkpoint is published and the run resumes from it.
    (base / "fits").mkdir()
    run_dir, text, before, after = stop_with_grace(
        bins, base / "fits", "r", [launch_counter("count-0")], grace_s=30, every_s=1
    )
    assert len(after) == len(before) + 1, (before, after)
    stopped = [e for e in events(run_dir) if e["kind"] == "stopped"]
    assert stopped, events(run_dir)
    assert stopped[-1]["checkpoint"], stopped
    resume_to_the_end(bins, run_dir, ["count-0"], base / "fits" / "resume.log")

    # Cannot fit: the last checkpoint (a 64 MiB sandbox archived) took longer than the
    # grace period leaves, so no stop checkpoint is tried.
    (base / "skip").mkdir()
    run_dir, text, before, after = stop_with_grace(
        bins, base / "skip", "r", [big_counter("big-0")], grace_s=1, every_s=3
    )
    assert "would take about" in text, text[-4000:]
    assert "stopping without a stop checkpoint" in text, text[-4000:]
    assert after == before
    resume_to_the_end(bins, run_dir, ["big-0"], base / "skip" / "resume.log")

    # No checkpoint yet to go by: tried, and abandoned unpublished when the grace runs out.
    (base / "abandon").mkdir()
    run_dir, text, before, after = stop_with_grace(
        bins,
        base / "abandon",
        "r",
        [big_counter(f"big-{n}") for n in range(3)],
        grace_s=1,
        every_s=0,
    )
    assert "abandoned: the 1.0 s grace period after SIGTERM ran out" in text, text[-4000:]
    assert before == [], before
    assert after == [], after
    resume_to_the_end(
        bins, run_dir, [f"big-{n}" for n in range(3)], base / "abandon" / "resume.log"
    )


def test_a_run_that_never_published_starts_again_in_its_store(bins: Binaries, base: Path) -> None:
    ids = ["count-0"]
    tasks_file, config = write_run(base, [launch_counter("count-0", lines=8)], checkpoint_every_s=0)
    old = base / "a"
    a = start(
        [bins.rollpoint, "run", tasks_file, "--config", config, "--run-dir", old],
        bins,
        base / "a.log",
    )
    wait_for("the launch", lambda: "launch started" in (base / "a.log").read_text(), base / "a.log")
    assert published(base / "store") == []
    lose_machine(bins, a, old)
    # The claim is there and no checkpoint: `--or-resume` starts the run again in the same
    # store once the old holder's lease has run out.
    new = base / "b"
    done = command(
        bins,
        elsewhere(
            [bins.rollpoint, "run", tasks_file, "--config", config, "--run-dir", new, "--or-resume"]
        ),
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err[-4000:]
    assert "taking the run over" in err, err[-4000:]
    row = every_task_once(new, ids)["count-0"]
    assert row["attempt"] == 0, row
