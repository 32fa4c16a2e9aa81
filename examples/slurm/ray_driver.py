"""The driver of examples/slurm/ray-cluster.sbatch: rollpoint on every node of the job's Ray
cluster (``rollpoint.ray``), a tasks file in, one result line per task out.

Environment (set by the sbatch script, or by you):
  TASKS             the tasks file (RolloutTask v1 lines), on shared storage.
  RESULTS           where results are appended, one JSON line per task, on shared storage. A
                    task with a line here is not run again: a requeued job picks up the rest.
  CHECKPOINT_STORE  the checkpoint store, shared (``s3://...``, ``file:///shared/...``).
  WORKDIR           each node's run directory, on node-local disk (the same path on every node).
  MODEL_UPSTREAM    the model's base URL (or MODEL_SCRIPT, a scripted model for a dry run).
  CHECKPOINT_EVERY_S  seconds between checkpoints (default 60).

Checkpoints go to the store every CHECKPOINT_EVERY_S seconds: when a node is lost while the job
runs, its rollouts continue on the other nodes from the newest one. SIGTERM (preemption,
``scontrol requeue``, ``scancel``, or the lead-time ``--signal`` before the time limit) ends
the driver at once with exit 75: each result line is on disk as soon as it is in. rollpoint.ray
cannot yet restore a whole cluster's rollouts from the store after every node is gone, so a
requeued job starts the rollouts that have no result line over from their tasks; each run of
the job uses a store prefix of its own (``restart-N``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import ray

from rollpoint.ray import RollpointCluster
from rollpoint.wire import RolloutResult

EXIT_STOPPED = 75
# How long the nodes may take to join the cluster.
JOIN_S = 300.0


def line(result: RolloutResult) -> str:
    row = dataclasses.asdict(result)
    row.pop("extra", None)
    return json.dumps(row, default=str) + "\n"


def main() -> int:
    tasks_path = Path(os.environ["TASKS"])
    results_path = Path(os.environ["RESULTS"])
    every_s = float(os.environ.get("CHECKPOINT_EVERY_S", "60"))
    tasks = [json.loads(t) for t in tasks_path.read_text().splitlines() if t.strip()]
    done: set[str] = set()
    if results_path.exists():
        for row in results_path.read_text().splitlines():
            try:
                done.add(json.loads(row)["task_id"])
            except (ValueError, KeyError):
                continue  # a line cut short by a SIGKILL: that task runs again
    todo = [t for t in tasks if t["task"]["id"] not in done]
    print(f"driver: {len(done)} of {len(tasks)} tasks have results; {len(todo)} to run", flush=True)
    if not todo:
        return 0
    ray.init(address="auto", log_to_driver=False)
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    end = time.monotonic() + JOIN_S
    while sum(1 for n in ray.nodes() if n.get("Alive")) < nodes:
        if time.monotonic() > end:
            raise SystemExit(f"driver: fewer than {nodes} Ray nodes after {JOIN_S:.0f} s")
        time.sleep(2)
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    rc = RollpointCluster(
        checkpoint_store=f"{os.environ['CHECKPOINT_STORE'].rstrip('/')}/restart-{restart}",
        model_upstream=os.environ.get("MODEL_UPSTREAM"),
        model_script=os.environ.get("MODEL_SCRIPT"),
        workdir=os.environ["WORKDIR"],
    )

    # Installed after Ray's. Every result line is already on disk, so a stop has nothing to
    # save: the driver exits at once, rather than wait on Ray and rollpoint services that Slurm
    # is stopping on every node too. Rollouts without a line start over in the next run of the
    # job.
    def on_term(_sig: int, _frame: FrameType | None) -> None:
        print("driver: SIGTERM; exiting 75", flush=True)
        os._exit(EXIT_STOPPED)

    signal.signal(signal.SIGTERM, on_term)
    try:
        pending = [rc.submit(t) for t in todo]
        last = time.monotonic()
        with results_path.open("a") as out:
            while pending:
                try:
                    got = rc.result(pending[0], timeout=1.0)
                except TimeoutError:
                    got = None
                if got is not None:
                    out.write(line(got))
                    out.flush()
                    os.fsync(out.fileno())
                    pending.pop(0)
                if time.monotonic() - last >= every_s:
                    print(f"driver: checkpoint {rc.checkpoint().id}", flush=True)
                    last = time.monotonic()
    finally:
        rc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
