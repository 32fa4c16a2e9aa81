"""rollpoint on three simulated Ray nodes on this machine, with a checkpoint store on local
disk playing the shared one: twelve counting rollouts spread over the nodes, a checkpoint,
then one node removed mid-run. Every rollout still finishes once; the lost node's continue on
another node from the store, as their next attempt.

Run as root (sandboxes need it), after building (`cargo build --workspace --bins` and
`scripts/build-static`) and `pip install './python[ray]'`:

    ROLLPOINT_BIN=target/debug/rollpoint \
    ROLLPOINT_SUPERVISOR=target/x86_64-unknown-linux-musl/release/rollpoint-supervisor \
    python3 examples/cluster/three_nodes.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster
from rollpoint.ray import RollpointCluster

LINES = 40


def counting_task(rid: str) -> dict[str, object]:
    script = (
        f'n=$(wc -l < lines 2>/dev/null || echo 0); while [ "$n" -lt {LINES} ]; '
        f'do n=$((n+1)); echo "$n" >> lines; sleep 0.25; done'
    )
    return {
        "v": 1,
        "task": {
            "id": rid,
            "verify": {"command": ["/bin/sh", "-c", f"seq 1 {LINES} | cmp -s - lines"]},
        },
        "adapter": {
            "kind": "command",
            "argv": ["/bin/sh", "-c", script],
            "pauses": True,
        },
    }


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="rollpoint-cluster-", dir="/var/tmp"))
    script = work / "model.json"
    script.write_text(
        json.dumps({"version": 1, "steps": [], "after_last": {"text": "done"}})
    )
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    workers = [cluster.add_node(num_cpus=2) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    rc = RollpointCluster(
        checkpoint_store=f"file://{work}/store",
        model_script=script,
        workdir=work / "nodes",
    )
    try:
        ids = [rc.submit(counting_task(f"count-{i:02d}")) for i in range(12)]
        time.sleep(4)
        print("checkpoint", rc.checkpoint().id)
        by_id = {w.node_id: w for w in workers}
        lost = next(n for n in rc.nodes.values() if n.node_id in by_id)
        print(
            f"removing node {lost.index}, which holds",
            [r for r in ids if rc.where(r) == lost.index],
        )
        cluster.remove_node(by_id[lost.node_id], allow_graceful=False)
        for rid, result in rc.results(timeout=600).items():
            print(
                f"{rid}: {result.status}, passed {result.verdict and result.verdict.passed}, attempt {result.attempt}"
            )
        print("moved:", rc.status()["moved"])
    finally:
        rc.stop()
        ray.shutdown()
        cluster.shutdown()
    print(
        f"the lost node's frozen sandboxes: rollpoint sweep {work}/nodes/node-{lost.index}"
    )


if __name__ == "__main__":
    main()
