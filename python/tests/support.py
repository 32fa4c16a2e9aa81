"""Real rollpoint processes for the tests, started the way the Rust process tests start them.

Each service writes its port to a file (``--port-file``) and logs to a file
of its own; a service that exits early or never listens fails the test with
its log. Nothing here skips: without the binaries, or without root (the
sandboxes need it), a test that needs them fails and says what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TOKEN = "python-client-token"
# Lines a counting task appends, one every TICK seconds.
LINES = 16
TICK = "0.25"
# Shell steps of the native worker's model script.
STEPS = 6
LIMIT_S = 180.0


@dataclass(frozen=True)
class Binaries:
    rollpoint: Path
    supervisor: Path
    worker: Path


def binaries() -> Binaries:
    """The binaries named by ROLLPOINT_BIN, ROLLPOINT_SUPERVISOR and ROLLPOINT_WORKER_BIN."""
    found: dict[str, Path] = {}
    problems = []
    for var in ("ROLLPOINT_BIN", "ROLLPOINT_SUPERVISOR", "ROLLPOINT_WORKER_BIN"):
        value = os.environ.get(var)
        if not value:
            problems.append(f"{var} is not set")
            continue
        p = Path(value)
        if not (p.is_file() and os.access(p, os.X_OK)):
            problems.append(f"{var}={value} is not an executable file")
        found[var] = p
    if problems:
        pytest.fail(
            "these tests run the real rollpoint binaries: "
            + "; ".join(problems)
            + " (scripts/test sets them to the builds under target/)",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail("these tests create sandboxes and must run as root", pytrace=False)
    return Binaries(
        found["ROLLPOINT_BIN"], found["ROLLPOINT_SUPERVISOR"], found["ROLLPOINT_WORKER_BIN"]
    )


def short_tmpdir(prefix: str) -> Path:
    # A sandbox's control socket path holds the run directory and the rollout
    # id and must stay under 108 bytes, so runs live in short paths.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def write_secret(path: Path, text: str) -> Path:
    """Writes a token file readable by its owner only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    path.chmod(0o600)
    return path


class Services:
    """Child processes of one test module, each with its log; stopped last started first."""

    def __init__(self, bins: Binaries, logs: Path) -> None:
        self.bins = bins
        self.logs = logs
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def log(self, name: str) -> str:
        try:
            return (self.logs / f"{name}.log").read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def spawn(self, name: str, args: Sequence[str | os.PathLike[str]]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as log:
            child = subprocess.Popen(
                [self.bins.rollpoint, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.children.append((name, child))
        return child

    def start(self, name: str, args: Sequence[str | os.PathLike[str]]) -> int:
        """Starts ``rollpoint ARGS --port-file F`` and returns the port it wrote."""
        port_file = self.logs / f"{name}.port"
        port_file.unlink(missing_ok=True)
        child = self.spawn(name, [*args, "--port-file", port_file])
        end = time.monotonic() + 60
        while True:
            try:
                return int(port_file.read_text().strip())
            except (OSError, ValueError):
                pass
            if child.poll() is not None:
                pytest.fail(f"{name} exited {child.returncode} before listening:\n{self.log(name)}")
            if time.monotonic() > end:
                pytest.fail(f"{name} wrote no port within 60 s:\n{self.log(name)}")
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM to each, last started first; each must exit cleanly."""
        failures = []
        while self.children:
            name, child = self.children.pop()
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            try:
                code = child.wait(timeout=LIMIT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                failures.append(f"{name} did not stop within {LIMIT_S} s:\n{self.log(name)}")
                continue
            if code != 0:
                failures.append(f"{name} exited {code}:\n{self.log(name)}")
        if failures:
            pytest.fail("\n".join(failures))

    def kill_all(self) -> None:
        while self.children:
            _, child = self.children.pop()
            if child.poll() is None:
                child.kill()
            child.wait()


def wait_control(
    run_dir: Path, child: subprocess.Popen[bytes], services: Services, name: str
) -> None:
    """Until ``rollpoint run|resume --listen`` (service ``name``) has written its
    ``control.json``; a failure with its log if it exits first or takes over 60 s."""
    end = time.monotonic() + 60
    while not (run_dir / "control.json").is_file():
        if child.poll() is not None:
            pytest.fail(f"{name} exited {child.returncode}:\n{services.log(name)}")
        if time.monotonic() > end:
            pytest.fail(f"no control.json within 60 s:\n{services.log(name)}")
        time.sleep(0.05)


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def model_script(path: Path) -> Path:
    """The scripted model the native worker talks to: STEPS shell steps, then done."""
    steps = [{"shell": [f"echo step {n} >> work.txt; sleep 0.4"]} for n in range(1, STEPS + 1)]
    path.write_text(json.dumps({"version": 1, "steps": steps, "after_last": {"text": "done"}}))
    return path


def counting_task(rid: str, lines: int = LINES, tick: str = TICK) -> dict[str, Any]:
    """Appends 1..lines to a file, continuing from its length; passes with each line once."""
    script = (
        f'n=$(wc -l < lines 2>/dev/null || echo 0); while [ "$n" -lt {lines} ]; '
        f'do n=$((n+1)); echo "$n" >> lines; sleep {tick}; done'
    )
    check = f"seq 1 {lines} | cmp -s - lines"
    return {
        "v": 1,
        "task": {"id": rid, "verify": {"command": ["/bin/sh", "-c", check]}},
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": True},
    }


def native_task(rid: str, worker: Path) -> dict[str, Any]:
    """The native worker (the static ROLLPOINT_WORKER_BIN) calling the scripted model
    through the gateway for its STEPS shell steps."""
    wrapper = (
        '#!/bin/sh\nin="$1"; shift\n'
        'sed "s|@MODEL@|$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1|" "$in" > "$in.live"\n'
        f'exec {worker} "$in.live" "$@"\n'
    )
    worker_input = {
        "v": 1,
        "rollout_id": rid,
        "task": {"prompt": "Append the steps to work.txt."},
        "model": {"base_url": "@MODEL@", "api": "chat_completions", "name": "scripted"},
        "workdir": "/workspace",
    }
    check = (
        f'test "$(wc -l < work.txt)" -eq {STEPS} && test "$(sort -u work.txt | wc -l)" -eq {STEPS}'
    )
    return {
        "v": 1,
        "task": {
            "id": rid,
            "files": {"input.json": json.dumps(worker_input), "run-worker": wrapper},
            "setup": [["chmod", "0755", "run-worker"]],
            "verify": {"command": ["/bin/sh", "-c", check]},
        },
        "adapter": {"kind": "native", "input": "input.json", "worker": "./run-worker"},
    }


@dataclass
class ServeStack:
    """The five processes of a run spread over services: model, gateway, owner, agent,
    coordinator."""

    dir: Path
    run: Path
    token_file: Path
    services: Services
    gateway: str
    owner: str
    agent: str
    coordinator: str
    bins: Binaries


def start_serve_stack(bins: Binaries, prefix: str, *, tokens: bool = False) -> ServeStack:
    """Starts the five services; with ``tokens`` the scripted model answers in vLLM's token
    shapes and the gateway captures each call's token ids and logprobs."""
    base = short_tmpdir(prefix)
    run = base / "run"
    logs = base / "logs"
    (run / "gateway").mkdir(parents=True)
    logs.mkdir()
    token = write_secret(base / "token", TOKEN)
    script = model_script(base / "model.json")
    svc = Services(bins, logs)
    try:
        model_flags = ["--tokens"] if tokens else []
        model = svc.start(
            "model",
            ["model-script", "--script", script, "--log", base / "model.log", *model_flags],
        )
        gateway_flags = ["--model-tokens", "vllm"] if tokens else []
        # The run's route key: every launch's route carries its attempt's secret.
        route_key = base / "route.key"
        route_key.write_text(json.dumps({"v": 1, "key": os.urandom(32).hex()}))
        route_key.chmod(0o600)
        gateway = url(
            svc.start(
                "gateway",
                [
                    "serve", "gateway",
                    "--upstream", url(model),
                    "--api", "all",
                    "--db", run / "gateway/ledger.sqlite",
                    "--open-keys",
                    "--run-dir", run,
                    "--control-token-file", token,
                    "--route-key-file", route_key,
                    *gateway_flags,
                ],
            )
        )  # fmt: skip
        owner = url(
            svc.start(
                "owner",
                [
                    "serve", "owner",
                    "--gateway", gateway,
                    "--run-dir", run,
                    "--token-file", token,
                    "--store", "copy",
                    "--supervisor", bins.supervisor,
                ],
            )
        )  # fmt: skip
        agent = url(
            svc.start(
                "agent",
                [
                    "serve", "agent",
                    "--run-dir", run,
                    "--token-file", token,
                    "--owner", owner,
                    "--gateway", gateway,
                    "--route-key-file", route_key,
                    "--concurrency", "8",
                    "--listen", "127.0.0.1:0",
                ],
            )
        )  # fmt: skip
        coordinator = url(
            svc.start(
                "coordinator",
                [
                    "serve", "coordinator",
                    "--run-dir", run,
                    "--token-file", token,
                    "--participant", f"model={gateway}",
                    "--participant", f"agent={agent}",
                    "--participant", f"resources={owner}",
                ],
            )
        )  # fmt: skip
    except BaseException:
        # The failure carries the service's log; nothing else is worth keeping.
        svc.kill_all()
        remove_tree(base)
        raise
    return ServeStack(base, run, token, svc, gateway, owner, agent, coordinator, bins)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in this mount namespace."""
    root = str(path.resolve())
    found = []
    with Path("/proc/self/mounts").open() as f:
        for line in f:
            point = line.split()[1].replace("\\040", " ")
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return found


def remove_tree(path: Path) -> None:
    """Deletes a test's directory, unless something is still mounted in it (a sandbox
    left behind is for ``rollpoint sweep``, never for rmtree through its mounts)."""
    if not mounts_under(path):
        shutil.rmtree(path, ignore_errors=True)


def end_run(bins: Binaries, child: subprocess.Popen[bytes], run_dir: Path) -> None:
    """Ends a ``rollpoint run`` still going (SIGTERM: checkpoint and stop), and sweeps
    what a run that had to be killed left."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            subprocess.run(
                [bins.rollpoint, "sweep", run_dir],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=LIMIT_S,
                check=False,
            )


# A synthetic trajectory document: two model calls laid out the way the exporter
# lays them out, for the readers' own tests.

FIRST: dict[str, list[Any]] = {"prompt": [1, 2, 3], "completion": [4, 5], "logprobs": [-0.5, -0.25]}
# The second call's prompt extends the first's tokens by a tool result (6, 7).
SECOND: dict[str, list[Any]] = {
    "prompt": [1, 2, 3, 4, 5, 6, 7],
    "completion": [8],
    "logprobs": [-1.0],
}


def call(i: int, c: dict[str, list[Any]]) -> dict[str, Any]:
    return {
        "call_id": f"call-{i}",
        "route": "chat",
        "model": "scripted",
        "prompt_ids": c["prompt"],
        "completion_ids": c["completion"],
        "logprobs": c["logprobs"],
        "finish_reason": "stop",
        "replayed_from": None,
        "latency_ms": 12,
    }


def segment() -> dict[str, Any]:
    tokens = SECOND["prompt"] + SECOND["completion"]
    written = set(range(3, 5)) | {7}
    mask = [1 if i in written else 0 for i in range(len(tokens))]
    model_lp = iter(FIRST["logprobs"] + SECOND["logprobs"])
    logprobs = [next(model_lp) if m else 0.0 for m in mask]
    return {"first_call": 0, "tokens": tokens, "loss_mask": mask, "logprobs": logprobs}


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "v": 1,
        "rollout": "r-1",
        "attempt": 2,
        "trainable": True,
        "not_trainable": None,
        "reward": 1.0,
        "passed": True,
        "calls": [call(0, FIRST), call(1, SECOND)],
        "token_breaks": [],
        "segments": [segment()],
        "metrics": {
            "turns": 2,
            "tool_calls": 1,
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "model_latency_ms": 24,
            "paused_ms": 0,
            "launches": 1,
            "checkpoints": 1,
        },
    }
    doc.update(changes)
    return doc
