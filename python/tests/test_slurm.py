"""rollpoint under a real Slurm: a private one-node cluster started by the tests (slurm.py).

First, what Slurm itself does, with shell jobs: ``scontrol requeue`` sends the running job
SIGCONT and SIGTERM at once (every process of it, not the ``--signal`` one, which belongs to
the time limit), SIGKILL ``KillWait`` seconds later; the requeued job is pending, not held
(Reason=BeginTime for the credential lifetime), then runs again by itself with
``SLURM_RESTART_COUNT=1`` (unset on the first run).

Then ``examples/slurm/rollpoint.sbatch`` with counting tasks and a checkpoint store on local
disk playing the shared one, its run directory new on each run of the job (``%r``, as on
another node): requeued once its first checkpoint is in the store, the first run stops on
SIGTERM after a stop checkpoint (exit 75), the second resumes from the store alone, and every
task ends once, verified (each count file holds 1..N, each number once).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm import CRED_EXPIRE_S, KILL_WAIT_S, SlurmCluster, running_cluster
from support import Binaries, counting_task, model_script, remove_tree, short_tmpdir

SBATCH = Path(__file__).resolve().parents[2] / "examples" / "slurm" / "rollpoint.sbatch"
# Every wait on a job is bounded by this.
LIMIT_S = 300.0
# Counting tasks long enough to be mid-run when the job is requeued (0.25 s a line).
RUN_LINES = 80
TASKS = [f"count-{i}" for i in range(3)]
# Longer than one run of a one-minute job stopped 30 s before its end: 40 s of counting.
TIME_LIMIT_LINES = 160
GRACE_S = 20

# Traps SIGTERM, writing when it came; the first run exits 75 on it (IGNORE unset) or carries
# on (IGNORE=1, to see when SIGKILL comes); later runs exit 0. SIGCONT, which Slurm sends just
# before SIGTERM, is not trapped: bash 5.2 can drop a SIGTERM that arrives while a SIGCONT trap
# runs.
SHELL_JOB = """#!/bin/bash
# Times from bash itself ($EPOCHREALTIME): Slurm signals every process of the job, a `date`
# child included.
m="$MARK/run-${SLURM_RESTART_COUNT:-unset}"
echo "start $EPOCHREALTIME" >>"$m"
if [ -n "${IGNORE:-}" ]; then
  trap 'echo "TERM $EPOCHREALTIME" >>"$m"' TERM
else
  trap 'echo "TERM $EPOCHREALTIME" >>"$m"; exit 75' TERM
fi
[ -n "${SLURM_RESTART_COUNT:-}" ] && exit 0
while :; do
  echo "$EPOCHREALTIME" >"$m.alive"
  sleep 0.2 &
  wait $!
done
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    with running_cluster() as cluster:
        yield cluster


def marks(path: Path) -> dict[str, float]:
    """``WORD TIME`` lines of a marker file, first time of each word."""
    found: dict[str, float] = {}
    for line in path.read_text().splitlines():
        word, _, at = line.partition(" ")
        found.setdefault(word, float(at))
    return found


def test_requeue_signals_and_hold_state(slurm: SlurmCluster) -> None:
    base = short_tmpdir("rpsh")
    try:
        script = base / "job.sh"
        script.write_text(SHELL_JOB)
        script.chmod(0o755)
        jobs = {}
        for name, env in (("exits", {}), ("ignores", {"IGNORE": "1"})):
            (base / name).mkdir()
            jobs[name] = slurm.sbatch(
                script,
                "--requeue",
                "--signal=B:TERM@60",
                f"--output={base / name / 'out.txt'}",
                "--open-mode=append",
                env={"MARK": str(base / name), **env},
            )

        def output(name: str) -> str:
            try:
                return (base / name / "out.txt").read_text(errors="replace")
            except OSError:
                return ""

        for name, job in jobs.items():
            slurm.wait_job(job, lambda f: f.get("JobState") == "RUNNING", "running", LIMIT_S)
            end = time.monotonic() + 30
            while not (base / name / "run-unset.alive").exists():
                assert time.monotonic() < end, f"job {name} never started its loop"
                time.sleep(0.1)
        requeued = time.time()
        for job in jobs.values():
            slurm.command("scontrol", "requeue", str(job))

        # Requeued, not held: pending until its begin time (the credential lifetime).
        for name, job in jobs.items():
            fields = slurm.wait_job(
                job, lambda f: f.get("JobState") == "PENDING", "pending again", LIMIT_S
            )
            assert fields["Reason"] == "BeginTime", (name, fields)
            assert int(fields["Priority"]) > 0, (name, fields)
            assert fields["Restarts"] == "1", (name, fields)
        # It runs again on its own (no `scontrol release`) and ends.
        for name, job in jobs.items():
            fields = slurm.wait_job(
                job,
                lambda f: f.get("JobState") == "COMPLETED",
                "completed after its requeue",
                LIMIT_S,
                extra=lambda name=name: output(name),
            )
            assert fields["ExitCode"] == "0:0", (name, fields)
            assert fields["Restarts"] == "1", (name, fields)
            marked = base / name
            # The first run had no SLURM_RESTART_COUNT; the second had 1.
            runs = sorted(p.name for p in marked.glob("run-*") if p.suffix != ".alive")
            assert runs == ["run-1", "run-unset"], runs
            first = marks(marked / "run-unset")
            second = marks(marked / "run-1")
            # SIGTERM at once, not the --signal (no time limit is near).
            assert "TERM" in first, (name, first)
            assert first["TERM"] - requeued < 5, (name, first, requeued)
            assert "DUE TO JOB REQUEUE" in output(name), output(name)
            # Started again once the credential lifetime had passed.
            assert second["start"] - first["TERM"] >= CRED_EXPIRE_S - 1, (name, first, second)
            last_alive = float((marked / "run-unset.alive").read_text())
            if name == "exits":
                assert last_alive - first["TERM"] < 5, (name, first, last_alive)
            else:
                # Carried on after SIGTERM until SIGKILL, KillWait seconds later.
                waited = last_alive - first["TERM"]
                assert KILL_WAIT_S - 2 <= waited <= KILL_WAIT_S + 5, (name, waited)
                assert second["start"] - first["TERM"] >= KILL_WAIT_S + CRED_EXPIRE_S - 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class RollpointJob:
    """examples/slurm/rollpoint.sbatch over counting tasks, with a checkpoint store under
    ``base`` playing the shared one."""

    slurm: SlurmCluster
    base: Path
    job: int = 0

    @property
    def store(self) -> Path:
        return self.base / "store"

    def output(self) -> str:
        try:
            return (self.base / "job.out").read_text(errors="replace")
        except OSError:
            return "(no job output)"

    def submit(self, bins: Binaries, lines: int, *options: str) -> int:
        tasks = [counting_task(t, lines=lines) for t in TASKS]
        (self.base / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
        model_script(self.base / "model.json")
        # examples/run.toml, with a checkpoint store and checkpoints every second.
        (self.base / "run.toml").write_text(
            "v = 1\n"
            "concurrency = 8\n"
            "checkpoint_every_s = 1\n"
            "keep = 2\n"
            'model_script = "model.json"\n'
            'store = "copy"\n'
            f'checkpoint_store = "file://{self.store}"\n'
            f'supervisor = "{bins.supervisor}"\n'
        )
        self.job = self.slurm.sbatch(
            SBATCH,
            *options,
            f"--output={self.base / 'job.out'}",
            "--open-mode=append",
            f"--chdir={self.base}",
            env={
                "TASKS": str(self.base / "tasks.jsonl"),
                "CONFIG": str(self.base / "run.toml"),
                # A new directory on each run of the job, as on another node.
                "RUN_DIR": str(self.base / "r%r"),
                "GRACE_S": str(GRACE_S),
                "PATH": f"{bins.rollpoint.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "ROLLPOINT_SUPERVISOR": str(bins.supervisor),
            },
        )
        return self.job

    def wait_end(self) -> dict[str, str]:
        return self.slurm.wait_job(
            self.job,
            lambda f: f.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
            "the end",
            LIMIT_S,
            extra=self.output,
        )

    def runs(self) -> list[str]:
        """The job's output split at each run's first line (``run N``)."""
        text = self.output()
        parts = re.split(rf"(?=rollpoint\.sbatch: job {self.job} run \d+ )", text)
        return [p for p in parts if p.startswith("rollpoint.sbatch: job ")]

    def every_task_verified(self, run_dir: Path, attempt: int | None = None) -> None:
        rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
        assert sorted(r["task_id"] for r in rows) == TASKS, rows
        for r in rows:
            assert r["status"] == "verified", r
            # The verify command: the count file holds 1..N, each number once.
            assert r["verdict"]["passed"] is True, r
            if attempt is not None:
                assert r["attempt"] == attempt, r


def test_rollpoint_job_survives_requeue(slurm: SlurmCluster, bins: Binaries) -> None:
    rp = RollpointJob(slurm, short_tmpdir("rps"))
    try:
        started = time.monotonic()
        job = rp.submit(bins, RUN_LINES, "--requeue", "--signal=B:TERM@60")
        end = time.monotonic() + LIMIT_S
        while not list(rp.store.glob("publish/*.json")):
            fields = slurm.job(job)
            if fields.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING"):
                slurm.fail(
                    f"job {job} is {fields.get('JobState')} before a checkpoint:\n{rp.output()}"
                )
            if time.monotonic() > end:
                slurm.fail(f"no checkpoint in {rp.store} within {LIMIT_S:.0f} s:\n{rp.output()}")
            time.sleep(0.2)
        first_checkpoint = time.monotonic()
        slurm.command("scontrol", "requeue", str(job))
        fields = rp.wait_end()
        finished = time.monotonic()
        assert fields["JobState"] == "COMPLETED", (fields, rp.output())
        assert fields["ExitCode"] == "0:0", (fields, rp.output())
        assert fields["Restarts"] == "1", (fields, rp.output())
        first, second = rp.runs()
        assert " run 0 " in first, first
        # The first run: SIGTERM passed on, a stop checkpoint, exit 75.
        assert "passed on to rollpoint" in first, first
        assert "stopped after a checkpoint" in first, first
        assert "rollpoint.sbatch: rollpoint exited 75" in first, first
        assert "requeueing job" not in first, first  # Slurm requeued it, not the script
        # The second, in an empty directory: resumed from the store.
        assert "holds this run; resuming it from there" in second, second
        assert "restored rollouts from a checkpoint" in second, second
        assert "rollpoint.sbatch: rollpoint exited 0" in second, second
        # Each continued as its next attempt from the first run's checkpoint.
        rp.every_task_verified(rp.base / "r1", attempt=1)
        early = rp.base / "r0" / "results.jsonl"
        assert not early.exists() or not early.read_text().strip(), "finished before the requeue"
        print(
            f"\nslurm requeue: first checkpoint after {first_checkpoint - started:.1f} s, "
            f"second run done {finished - first_checkpoint:.1f} s after the requeue"
        )
    finally:
        remove_tree(rp.base)


def test_rollpoint_job_requeues_itself_before_its_time_limit(
    slurm: SlurmCluster, bins: Binaries
) -> None:
    """A one-minute time limit and ``--signal=B:TERM@30``: the run stops on the lead-time
    signal, the script requeues its own job (the time limit would not), and the run goes on
    over as many runs of the job as it needs."""
    rp = RollpointJob(slurm, short_tmpdir("rpt"))
    try:
        started = time.monotonic()
        rp.submit(bins, TIME_LIMIT_LINES, "--requeue", "--time=1", "--signal=B:TERM@30")
        fields = rp.wait_end()
        took = time.monotonic() - started
        assert fields["JobState"] == "COMPLETED", (fields, rp.output())
        restarts = int(fields["Restarts"])
        assert restarts >= 1, (fields, rp.output())
        runs = rp.runs()
        assert len(runs) == restarts + 1, rp.output()
        for run in runs[:-1]:
            assert "passed on to rollpoint" in run, run
            assert "stopped after a checkpoint" in run, run
            assert "rollpoint.sbatch: rollpoint exited 75" in run, run
            assert "stopped before the time limit; requeueing job" in run, run
        assert "restored rollouts from a checkpoint" in runs[1], runs[1]
        assert "rollpoint.sbatch: rollpoint exited 0" in runs[-1], runs[-1]
        rp.every_task_verified(rp.base / f"r{restarts}")
        print(f"\nslurm time limit: {restarts + 1} runs, {took:.1f} s")
    finally:
        remove_tree(rp.base)
