"""rollpoint on a real Ray cluster of three nodes on this machine (``ray.cluster_utils``),
its checkpoints in a real S3 server (moto's): 24 rollouts (counting command tasks, the native
worker and Pi, a real harness) spread over the nodes, a checkpoint, then a node removed
mid-run. Every rollout finishes exactly once and verified; the ones the lost node held moved
to a survivor and continued from the checkpoint as their next attempt; no model call reached
the model twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster
from support import (
    Binaries,
    mounts_under,
    native_task,
    remove_tree,
    short_tmpdir,
    write_secret,
)

from rollpoint import Client
from rollpoint.ray import RollpointCluster

# Lines a counting task appends, one every TICK seconds: long enough to be cut mid-run.
LINES = 60
TICK = "0.25"
STEPS = 12
SECRET = "rp-ray-secret-51d0"


def counting_task(rid: str) -> dict[str, Any]:
    """Appends 1..LINES, continuing from the file's length, and records where each launch
    started; the reward is 1 plus the last start (above 1 when it continued)."""
    script = (
        f'n=$(wc -l < lines 2>/dev/null || echo 0); echo "$n" >> starts; '
        f'while [ "$n" -lt {LINES} ]; do n=$((n+1)); echo "$n" >> lines; sleep {TICK}; done'
    )
    reward = '"{\\"reward\\": $((1 + $(tail -n 1 starts)))}"'
    check = (
        f"if seq 1 {LINES} | cmp -s - lines; then echo {reward}; else echo '{{\"reward\": -1}}'; fi"
    )
    return {
        "v": 1,
        "task": {"id": rid, "verify": {"command": ["/bin/sh", "-c", check], "reward": "json"}},
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": True},
    }


def model_script(path: Path) -> Path:
    """The strict scripted model (it answers by the tool results in the conversation and
    asks again for a call whose result is missing): STEPS numbered lines, then done. Its
    answers depend on the conversation, not on who asks, so every harness can use it."""
    steps = [
        {"shell": [f"echo {n} >> lines; sleep 1"], "delay_ms": 200} for n in range(1, STEPS + 1)
    ]
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "key": "tool_results",
                "steps": steps,
                "after_last": {"text": "all lines written"},
                "no_tools_text": "Numbered lines",
            }
        )
    )
    return path


def lines_task(rid: str, adapter: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 1,
        "task": {
            "id": rid,
            "verify": {"command": ["/bin/sh", "-c", f"seq 1 {STEPS} | cmp -s - lines"]},
        },
        "adapter": adapter,
        "harness_timeout_s": 300,
    }


def native(rid: str, worker: Path) -> dict[str, Any]:
    """The native worker on the strict script; its prompt names it, so no two rollouts send
    the same conversation."""
    task = native_task(rid, worker)
    files = task["task"]["files"]
    worker_input = json.loads(files["input.json"])
    worker_input["task"]["prompt"] = f"Append the numbered lines ({rid})."
    files["input.json"] = json.dumps(worker_input)
    task["task"]["verify"] = {"command": ["/bin/sh", "-c", f"seq 1 {STEPS} | cmp -s - lines"]}
    return task


def start_s3(base: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """moto's S3 server on loopback with one bucket; returns it, its URL and an options file."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (base / "moto.log").open("ab")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=log,
    )
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    end = time.monotonic() + 30
    while True:
        try:
            boto3.client(
                "s3",
                endpoint_url=endpoint,
                aws_access_key_id="rp",
                aws_secret_access_key=SECRET,
                region_name="us-east-1",
            ).create_bucket(Bucket="rollpoint-ray")
            break
        except Exception:
            if server.poll() is not None or time.monotonic() > end:
                raise
            time.sleep(0.2)
    options = write_secret(
        base / "store.env",
        f"AWS_ENDPOINT={endpoint}\nAWS_ALLOW_HTTP=true\nAWS_REGION=us-east-1\n"
        f"AWS_ACCESS_KEY_ID=rp\nAWS_SECRET_ACCESS_KEY={SECRET}\n",
    )
    return server, "s3://rollpoint-ray/run", options


def test_a_node_removed_mid_run_loses_no_rollout(bins: Binaries) -> None:
    base = short_tmpdir("rray")
    s3, store, options = start_s3(base)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    workers = [cluster.add_node(num_cpus=2) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    rc: RollpointCluster | None = None
    try:
        rc = RollpointCluster(
            checkpoint_store=store,
            checkpoint_store_options=options,
            model_script=model_script(base / "model.json"),
            workdir=base / "nodes",
            rollpoint_bin=str(bins.rollpoint),
            supervisor=str(bins.supervisor),
            concurrency=16,
            snapshot_full_every=4,
        )
        assert len(rc.nodes) == 3
        # Pi first: the first two land on two nodes, so the lost one holds a real harness.
        ids = [
            rc.submit(
                lines_task(
                    f"pi{i}", {"kind": "pi", "prompt": f"Append the numbered lines (pi{i})."}
                )
            )
            for i in range(2)
        ]
        ids += [rc.submit(native(f"n{i}", bins.worker)) for i in range(3)]
        ids += [rc.submit(counting_task(f"c{i:02d}")) for i in range(19)]
        assert len(ids) == 24
        per_node = Counter(rc.where(r) for r in ids)
        assert len(per_node) == 3, f"spread over every node: {per_node}"
        # Every rollout launched (not still seeding), then a little more: the checkpoint
        # catches each counting task past its first lines.
        end = time.monotonic() + 300
        while True:
            states = [
                r.state for n in rc.nodes.values() for r in Client(n.agent, rc.token).rollouts()
            ]
            if len(states) == len(ids) and all(s == "running" for s in states):
                break
            assert time.monotonic() < end, f"rollouts never all ran: {Counter(states)}"
            time.sleep(0.2)
        time.sleep(2)
        reply = rc.checkpoint()
        assert reply.id
        # Lose a node that holds rollouts (not the driver's, which runs the gateway).
        by_id = {w.node_id: w for w in workers}
        victim = next(
            rc.nodes[rc.where(p)] for p in ("pi0", "pi1") if rc.nodes[rc.where(p)].node_id in by_id
        )
        held = {r for r in ids if rc.where(r) == victim.index}
        node = by_id[victim.node_id]
        cluster.remove_node(node, allow_graceful=False)

        results = rc.results(timeout=600)
        assert sorted(results) == sorted(ids)
        for rid, result in results.items():
            assert result.status == "verified", (rid, result)
            assert result.verdict is not None, (rid, result)
            assert result.verdict.passed, (rid, result)
        assert set(rc.moved) == held, f"moved {sorted(rc.moved)}, the lost node held {held}"
        print(f"moved from node {victim.index}: {sorted(held)}")
        assert not rc.started_over, f"every rollout was in the checkpoint: {rc.started_over}"
        assert any(r.startswith("pi") for r in held), "a real harness moved"
        # The reward is 1 plus the line a launch started from. A counting task the
        # checkpoint caught before its first line (a loaded machine can start a shell that
        # late) continues from 0, which is 1; none may start below its checkpoint (that
        # would fail the verify), and the moved ones as a whole must show lines carried over.
        continued = []
        for rid in held:
            result = results[rid]
            assert result.attempt == 1, (rid, result)
            if rid.startswith("c"):
                assert result.verdict is not None
                assert result.verdict.reward >= 1, (rid, result)
                continued.append(result.verdict.reward > 1)
        assert any(continued), "a moved counting task continued past its checkpoint's lines"
        for rid in set(ids) - held:
            assert results[rid].attempt == 0, rid
        status = rc.status()
        assert [n["alive"] for n in status["nodes"]].count(False) == 1
        log = (base / "nodes" / "head" / "model.log").read_text().splitlines()
        digests = [json.loads(line)["request_sha256"] for line in log]
        repeated = [d for d, n in Counter(digests).items() if n > 1]
        assert not repeated, f"{len(repeated)} model calls went upstream twice"
        for path in (base / "nodes").rglob("*.log"):
            assert SECRET not in path.read_text(errors="replace"), path
    finally:
        if rc is not None:
            rc.stop()
        ray.shutdown()
        cluster.shutdown()
        s3.kill()
        s3.wait()
        # The lost node's frozen sandboxes, as a sweep on that machine would remove them.
        for run in (base / "nodes").glob("node-*"):
            subprocess.run([bins.rollpoint, "sweep", run], check=False, capture_output=True)
    assert not mounts_under(base), mounts_under(base)
    remove_tree(base)
