"""rollpoint on a Ray cluster.

``RollpointCluster`` starts one rollpoint node per Ray node: a ``rollpoint serve owner`` and a
``rollpoint serve agent``, each with its own run directory on that node, held by a Ray actor
placed there through a placement group (``STRICT_SPREAD``). The gateway (with the scripted
model when one is given) and the coordinator run on the driver's node. Every service keeps
its checkpoints in the one checkpoint store (``s3://``, ``gs://``, ``az://`` or
``file:///shared/dir``), so a checkpoint outlives any node.

A trainer gets one object: ``submit`` places a rollout on the least loaded live node,
``result`` waits for it wherever it runs now, ``checkpoint`` takes a checkpoint of every
rollout in flight. When a node dies (its actor is gone, or it misses its heartbeat), the
cluster starts a coordinator over the survivors and restores the lost node's rollouts from
the latest published checkpoint onto the least loaded survivor, each as its next attempt; the
restore retires the lost attempts at the gateway first, so they can never write again.
Rollouts the checkpoint did not hold start over there from their task.

The Rust services stay engine-neutral HTTP; this module only starts them and calls their
routes. Ray is an optional extra: ``pip install './python[ray]'``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from .client import Client
from .errors import NotFound
from .wire import CheckpointReply, Move, RolloutResult

__all__ = ["NodeInfo", "RollpointCluster"]

# How long a node may miss its heartbeat before it counts as lost, in seconds.
HEARTBEAT_S = 10.0
# How long a service may take to listen, in seconds.
START_S = 120.0


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL when the actor that started it dies,
    so a lost node's services never outlive it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


class _Processes:
    """``rollpoint`` services started by one actor, each with a port file and a log."""

    def __init__(self, binary: str, logs: Path) -> None:
        self.binary = binary
        self.logs = logs
        # Services listen on this node's address, so the other nodes reach them.
        self.host = ray.util.get_node_ip_address()
        logs.mkdir(parents=True, exist_ok=True)
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: Sequence[str], *, listen: bool = True) -> str:
        """Starts ``rollpoint ARGS`` and returns its URL once it listens (on this node's
        address, or on 127.0.0.1 for a service that takes no ``--listen``)."""
        port_file = self.logs / f"{name}.port"
        host = self.host if listen else "127.0.0.1"
        bind = ["--listen", f"{host}:0"] if listen else []
        port_file.unlink(missing_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            child = subprocess.Popen(
                [self.binary, *args, *bind, "--port-file", str(port_file)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=_die_with_parent,
            )
        self.children[name] = child
        end = time.monotonic() + START_S
        while True:
            try:
                return f"http://{host}:{int(port_file.read_text().strip())}"
            except (OSError, ValueError):
                pass
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited {child.returncode}: {self.log(name)}")
            if time.monotonic() > end:
                raise RuntimeError(f"{name} did not listen within {START_S} s: {self.log(name)}")
            time.sleep(0.05)

    def log(self, name: str) -> str:
        try:
            return (self.logs / f"{name}.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, name: str) -> None:
        child = self.children.pop(name, None)
        if child is None:
            return
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=180)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def stop_all(self) -> None:
        for name in reversed(list(self.children)):
            self.stop(name)


@dataclass(frozen=True)
class _Settings:
    binary: str
    token: str
    workdir: str
    store: list[str]
    supervisor: str | None
    concurrency: int
    full_every: int
    route_key: str


@ray.remote(num_cpus=0.01, max_restarts=0)
class _NodeActor:
    """One rollpoint node: an owner and an agent on this Ray node."""

    def __init__(self, index: int, settings: _Settings, gateway: str) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        run = Path(settings.workdir) / f"node-{index}"
        run.mkdir(parents=True, exist_ok=True)
        self.run_dir = str(run)
        token_file = _write_token(run, settings.token)
        self.procs = _Processes(settings.binary, run / "logs")
        owner_args = [
            "serve",
            "owner",
            "--run-dir",
            str(run),
            "--token-file",
            token_file,
            "--instance",
            f"owner-{index}",
            "--snapshot-full-every",
            str(settings.full_every),
            *settings.store,
        ]
        if settings.supervisor:
            owner_args += ["--supervisor", settings.supervisor]
        # Sandboxes reach the gateway only through their relay, which dials it.
        owner_args += ["--gateway", gateway]
        route_key_file = _write_secret(run, "route.key", settings.route_key)
        self.owner = self.procs.start("owner", owner_args)
        self.agent = self.procs.start(
            "agent",
            [
                "serve",
                "agent",
                "--run-dir",
                str(run),
                "--token-file",
                token_file,
                "--owner",
                self.owner,
                "--gateway",
                gateway,
                "--route-key-file",
                route_key_file,
                "--instance",
                f"agent-{index}",
                "--concurrency",
                str(settings.concurrency),
                *settings.store,
            ],
        )

    def info(self) -> dict[str, str]:
        return {
            "node_id": self.node_id,
            "owner": self.owner,
            "agent": self.agent,
            "run_dir": self.run_dir,
        }

    def ping(self) -> str:
        for name, child in self.procs.children.items():
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited {child.returncode}: {self.procs.log(name)}")
        return self.node_id

    def stop(self) -> None:
        self.procs.stop_all()


@ray.remote(num_cpus=0.01, max_restarts=0)
class _HeadActor:
    """The gateway (and the scripted model) and the coordinator, on the driver's node."""

    def __init__(self, settings: _Settings, model: Mapping[str, str]) -> None:
        run = Path(settings.workdir) / "head"
        (run / "gateway").mkdir(parents=True, exist_ok=True)
        self.run = run
        self.token_file = _write_token(run, settings.token)
        self.settings = settings
        self.procs = _Processes(settings.binary, run / "logs")
        self.generation = 0
        upstream = model.get("upstream")
        if "script" in model:
            upstream = self.procs.start(
                "model",
                ["model-script", "--script", model["script"], "--log", str(run / "model.log")],
                listen=False,
            )
        if upstream is None:
            raise ValueError("give model_upstream or model_script")
        gateway_args = [
            "serve",
            "gateway",
            "--upstream",
            upstream,
            "--api",
            "all",
            "--db",
            str(run / "gateway" / "ledger.sqlite"),
            "--open-keys",
            "--run-dir",
            str(run),
            "--control-token-file",
            self.token_file,
            "--route-key-file",
            _write_secret(run, "route.key", settings.route_key),
            *settings.store,
        ]
        if model.get("credential_env"):
            gateway_args += ["--credential-env", model["credential_env"]]
        self.gateway = self.procs.start("gateway", gateway_args)
        self.coordinator = ""

    def gateway_url(self) -> str:
        return self.gateway

    def start_coordinator(self, participants: Sequence[str]) -> str:
        """(Re)starts the coordinator over ``participants`` (``KIND=URL``), each time in a
        directory of its own: what it restores comes from the checkpoint store."""
        self.procs.stop("coordinator")
        self.generation += 1
        run = self.run / f"coordinator-{self.generation}"
        run.mkdir(parents=True, exist_ok=True)
        args = [
            "serve",
            "coordinator",
            "--run-dir",
            str(run),
            "--token-file",
            self.token_file,
            *self.settings.store,
        ]
        for p in participants:
            args += ["--participant", p]
        self.coordinator = self.procs.start("coordinator", args)
        return self.coordinator

    def stop(self) -> None:
        self.procs.stop_all()


@dataclass
class NodeInfo:
    """A rollpoint node as the cluster knows it."""

    index: int
    node_id: str
    owner: str
    agent: str
    run_dir: str
    alive: bool = True
    last_seen: float = field(default_factory=time.monotonic)


class RollpointCluster:
    """rollpoint over every node of the connected Ray cluster (or the first ``nodes``).

    ``checkpoint_store`` is required: it is what lets a rollout outlive its node. Give
    ``model_upstream`` (an OpenAI- or Anthropic-compatible base URL) or ``model_script``.
    ``token`` guards every route (a random one when None). ``workdir`` is where each node
    keeps its run directory (on every node's local disk).
    """

    def __init__(
        self,
        *,
        checkpoint_store: str,
        checkpoint_store_options: str | os.PathLike[str] | None = None,
        model_upstream: str | None = None,
        model_script: str | os.PathLike[str] | None = None,
        model_credential_env: str | None = None,
        nodes: int | None = None,
        workdir: str | os.PathLike[str] = "/var/tmp/rollpoint-ray",
        rollpoint_bin: str | None = None,
        supervisor: str | None = None,
        concurrency: int = 8,
        snapshot_full_every: int = 8,
        token: str | None = None,
    ) -> None:
        if not ray.is_initialized():
            raise RuntimeError("ray.init() first: RollpointCluster runs on the connected cluster")
        if not 1 <= concurrency <= 65536:
            raise ValueError(f"concurrency {concurrency} is outside 1..=65536")
        work = Path(workdir)
        work.mkdir(parents=True, exist_ok=True)
        self.token = token or os.urandom(16).hex()
        store = ["--checkpoint-store", checkpoint_store]
        if checkpoint_store_options is not None:
            store += ["--checkpoint-store-options", os.fspath(checkpoint_store_options)]
        binary = rollpoint_bin or os.environ.get("ROLLPOINT_BIN") or "rollpoint"
        self.settings = _Settings(
            binary=binary,
            token=self.token,
            workdir=str(work),
            store=store,
            supervisor=supervisor or os.environ.get("ROLLPOINT_SUPERVISOR"),
            concurrency=concurrency,
            full_every=snapshot_full_every,
            route_key=json.dumps({"v": 1, "key": os.urandom(32).hex()}),
        )
        model: dict[str, str] = {}
        if model_script is not None:
            model["script"] = os.fspath(model_script)
        if model_upstream is not None:
            model["upstream"] = model_upstream
        if model_credential_env is not None:
            model["credential_env"] = model_credential_env
        here = ray.get_runtime_context().get_node_id()
        self._head = _HeadActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)
        ).remote(self.settings, model)
        self.gateway: str = ray.get(self._head.gateway_url.remote())
        alive = [n for n in ray.nodes() if n.get("Alive")]
        count = len(alive) if nodes is None else nodes
        if not 1 <= count <= len(alive):
            raise ValueError(f"nodes {count} is outside 1..={len(alive)} (the live Ray nodes)")
        self._pg = placement_group([{"CPU": 0.01}] * count, strategy="STRICT_SPREAD")
        ray.get(self._pg.ready(), timeout=START_S)
        self._actors: dict[int, Any] = {}
        self.nodes: dict[int, NodeInfo] = {}
        for i in range(count):
            actor = _NodeActor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._pg, placement_group_bundle_index=i
                )
            ).remote(i, self.settings, self.gateway)
            self._actors[i] = actor
        for i, actor in self._actors.items():
            info = ray.get(actor.info.remote(), timeout=START_S)
            self.nodes[i] = NodeInfo(index=i, **info)
        self._tasks: dict[str, dict[str, Any]] = {}
        self._placed: dict[str, int] = {}
        self._done: dict[str, RolloutResult] = {}
        # Rollouts a lost node held: (from, to) node indexes; those its checkpoint did not
        # hold start over from their task (`started_over`).
        self.moved: dict[str, tuple[int, int]] = {}
        self.started_over: set[str] = set()
        self.last_error: str | None = None
        self._lock = threading.RLock()
        self._coordinator = self._start_coordinator()
        # Results are collected as soon as they exist: one a node holds is lost with it.
        self._stopping = threading.Event()
        self._collector = threading.Thread(target=self._collect, name="rollpoint-results")
        self._collector.daemon = True
        self._collector.start()

    # Wiring.

    def _live(self) -> list[NodeInfo]:
        return [n for n in self.nodes.values() if n.alive]

    def _start_coordinator(self) -> Client:
        participants = [f"model={self.gateway}"]
        for n in self._live():
            participants += [f"agent={n.agent}", f"resources={n.owner}"]
        url = ray.get(self._head.start_coordinator.remote(participants), timeout=START_S)
        return Client(url, self.token)

    def _agent(self, index: int) -> Client:
        return Client(self.nodes[index].agent, self.token)

    def _load(self, index: int) -> int:
        return sum(1 for r, i in self._placed.items() if i == index and r not in self._done)

    # The trainer's side.

    def submit(self, task: Mapping[str, Any]) -> str:
        """Posts a rollout task (``RolloutTask`` v1) to the least loaded live node; returns
        its rollout id."""
        with self._lock:
            self.check()
            rid = str(task["task"]["id"])
            if rid in self._tasks:
                raise ValueError(f"rollout {rid} was submitted already")
            target = min(self._live(), key=lambda n: (self._load(n.index), n.index))
            self._agent(target.index).submit(dict(task))
            self._tasks[rid] = dict(task)
            self._placed[rid] = target.index
            return rid

    def checkpoint(self) -> CheckpointReply:
        """A checkpoint of every rollout in flight on every live node, published in the
        checkpoint store."""
        with self._lock:
            self.check()
            return self._coordinator.checkpoint()

    def where(self, rollout: str) -> int:
        """The index of the node the rollout runs on now."""
        return self._placed[rollout]

    def result(self, rollout: str, timeout: float | None = None) -> RolloutResult:
        """Waits for the rollout's result wherever it runs now, recovering lost nodes
        meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if rollout in self._done:
                    return self._done[rollout]
                self.check()
                index = self._placed[rollout]
            try:
                got = self._agent(index).result(rollout, timeout=2.0)
            except Exception as e:  # the node died under the call, or the result is not there
                if self._is_lost(index):
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"rollout {rollout}: no result: {e}") from e
                time.sleep(0.5)
                continue
            with self._lock:
                if self._placed.get(rollout) == index:
                    self._done[rollout] = got
                    return got

    def _collect(self) -> None:
        while not self._stopping.wait(1.0):
            with self._lock:
                live = [(n.index, n.agent) for n in self._live()]
            for index, agent in live:
                try:
                    client = Client(agent, self.token, timeout=10)
                    done = [s.rollout for s in client.rollouts() if s.state == "done"]
                    for rid in done:
                        got = client.get(rid)
                        with self._lock:
                            if isinstance(got, RolloutResult) and self._placed.get(rid) == index:
                                self._done.setdefault(rid, got)
                except Exception:  # a node going away; check() decides
                    continue

    def results(self, timeout: float | None = None) -> dict[str, RolloutResult]:
        """Every submitted rollout's result."""
        return {r: self.result(r, timeout) for r in list(self._tasks)}

    def status(self) -> dict[str, Any]:
        """Each node, whether it is alive, and how many rollouts it holds."""
        with self._lock:
            return {
                "nodes": [
                    {
                        "index": n.index,
                        "node_id": n.node_id,
                        "alive": n.alive,
                        "rollouts": self._load(n.index),
                    }
                    for n in self.nodes.values()
                ],
                "moved": {r: list(m) for r, m in self.moved.items()},
            }

    # Losing a node.

    def _is_lost(self, index: int) -> bool:
        with self._lock:
            self.check()
            return not self.nodes[index].alive

    def check(self) -> list[int]:
        """Pings every live node; recovers the ones that are gone. Returns their indexes."""
        with self._lock:
            lost = []
            for n in self._live():
                try:
                    ray.get(self._actors[n.index].ping.remote(), timeout=HEARTBEAT_S)
                    n.last_seen = time.monotonic()
                except (ray.exceptions.RayError, RuntimeError):
                    lost.append(n.index)
            for index in lost:
                self._recover(index)
            return lost

    def _recover(self, index: int) -> None:
        dead = self.nodes[index]
        dead.alive = False
        if not self._live():
            raise RuntimeError("every rollpoint node is lost")
        target = min(self._live(), key=lambda n: (self._load(n.index), n.index))
        self._coordinator = self._start_coordinator()
        stranded = {r for r, i in self._placed.items() if i == index and r not in self._done}
        moved: set[str] = set()
        try:
            reply = self._coordinator.restore(
                moves=[
                    Move("agent", f"agent-{index}", f"agent-{target.index}"),
                    Move("resources", f"owner-{index}", f"owner-{target.index}"),
                ]
            )
            for member in reply.restored:
                if member.kind == "agent":
                    moved |= {_rollout_of(k) for k in member.keys}
        except NotFound:
            pass  # nothing was ever published: everything starts over
        for rid in stranded:
            if rid not in moved:
                # Not in the checkpoint: it starts over from its task on the target.
                self._agent(target.index).submit(self._tasks[rid])
                self.started_over.add(rid)
            self._placed[rid] = target.index
            self.moved[rid] = (index, target.index)
        # A checkpoint right away, so a second loss restores the new attempts.
        try:
            self._coordinator.checkpoint()
        except Exception as e:  # recorded, not fatal: the next checkpoint covers them
            self.last_error = f"checkpoint after recovering node {index}: {e}"

    def stop(self) -> None:
        """Stops every service (rollouts still running end with them) and the actors."""
        self._stopping.set()
        self._collector.join(timeout=30)
        with self._lock:
            for n in self._live():
                with contextlib.suppress(ray.exceptions.RayError):
                    ray.get(self._actors[n.index].stop.remote(), timeout=300)
            ray.get(self._head.stop.remote(), timeout=300)
            for actor in [*self._actors.values(), self._head]:
                ray.kill(actor)
            remove_placement_group(self._pg)

    def __enter__(self) -> RollpointCluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        live = len(self._live())
        return f"RollpointCluster({live} of {len(self.nodes)} nodes live, gateway {self.gateway})"


def _write_token(run: Path, token: str) -> str:
    """Writes the routes' token into this node's run directory (0600); returns its path."""
    return _write_secret(run, "token", token)


def _write_secret(run: Path, name: str, text: str) -> str:
    """Writes ``text`` to ``run/name`` (0600, atomically); returns its path."""
    path = run / name
    tmp = run / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    dir_fd = os.open(run, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return str(path)


def _rollout_of(key: str) -> str:
    """The rollout of attempt key ``key`` (``<rollout>`` or ``<rollout>-a<N>``)."""
    head, sep, tail = key.rpartition("-a")
    return head if sep and head and tail.isdigit() else key
