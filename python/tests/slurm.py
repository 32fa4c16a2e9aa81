"""A private Slurm cluster on this machine, for the tests only (never for users).

``running_cluster()`` starts, as root and entirely under a temporary directory, a ``munged``
with its own key, socket, pid and log, then ``slurmctld -D`` and ``slurmd -D`` as child
processes on free ports with a ``slurm.conf`` of one node (this machine, its CPUs and memory
as ``slurmd -C`` reads them) in one partition, and waits until ``sinfo`` calls the node idle.
Every Slurm command the tests run goes through ``SlurmCluster.command``, which sets
``SLURM_CONF``. At the end every job is cancelled, the daemons are stopped and the directory
is removed, on failure too. A daemon that exits or a node that never comes up fails the test
with the daemons' log tails.

The configuration, and why:

- ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none``: rollpoint keeps each
  sandbox in cgroups of its own and sets their limits itself, so Slurm's cgroups are left out
  (this machine's cgroup controllers are not Slurm's to take either). linuxproc tracks a job's
  processes by parentage: Slurm signals every descendant of the batch shell.
- ``KillWait=30``: Slurm's default, the SIGTERM to SIGKILL interval on a requeue, a cancel
  and the time limit.
- ``AuthInfo=socket=...,cred_expire=10``: the private munge socket, and a 10 s credential
  lifetime, which is also how long a requeued job waits before it may start again (120 s by
  default), so a requeue test takes seconds rather than minutes.
- ``JobRequeue=1``: batch jobs may be requeued unless submitted with ``--no-requeue``.
- ``SchedulerParameters=sched_interval=2,bf_interval=1``: a job whose begin time has come is
  started within seconds (by default the scheduler looks again within 60 s).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

KILL_WAIT_S = 30
CRED_EXPIRE_S = 10
PARTITION = "main"
# How long the daemons may take to bring the node up.
START_S = 60.0
COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel")


@dataclass
class Daemon:
    name: str
    child: subprocess.Popen[bytes]
    # Its own log file, and what it wrote to stderr.
    log: Path
    stderr: Path

    def tail(self, limit: int = 3000) -> str:
        parts = []
        for path in (self.log, self.stderr):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                parts.append(f"--- {path.name}:\n{text[-limit:]}")
        return "\n".join(parts) or "(nothing logged)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node_line() -> str:
    """This machine as ``slurmd -C`` describes it (NodeName, CPUs, sockets, memory), without
    its uptime."""
    out = subprocess.run(
        ["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    line = next((t for t in out.splitlines() if t.startswith("NodeName=")), None)
    if line is None:
        pytest.fail(f"slurmd -C printed no NodeName line:\n{out}")
    return " ".join(f for f in line.split() if not f.startswith("UpTime="))


def _processes_under(path: Path) -> list[int]:
    """Pids of processes whose command line names something under ``path`` (job scripts
    copied to the spool directory, which proctrack/linuxproc loses once they are orphaned)."""
    mark = str(path).encode() + b"/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with suppress(OSError):
            if mark in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


class SlurmCluster:
    """The daemons of one private cluster and the commands that talk to it."""

    def __init__(self, base: Path) -> None:
        self.dir = base
        self.conf = base / "slurm.conf"
        self.logs = base / "log"
        self.daemons: list[Daemon] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.node = ""

    # Starting.

    def _spawn(self, name: str, argv: Sequence[str], log: Path) -> Daemon:
        stderr = self.logs / f"{name}.stderr"
        with stderr.open("ab") as err:
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=self.env
            )
        daemon = Daemon(name, child, log, stderr)
        self.daemons.append(daemon)
        return daemon

    def start(self) -> None:
        munge = self.dir / "munge"
        run = self.dir / "run"
        for d, mode in ((munge, 0o700), (run, 0o755), (self.logs, 0o755)):
            d.mkdir()
            d.chmod(mode)
        self.dir.chmod(0o755)
        key = munge / "munge.key"
        if shutil.which("mungekey"):
            subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=30)
        else:
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = run / "munge.socket"
        munged = self._spawn(
            "munged",
            [
                "munged", "--foreground", "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--log-file={self.logs / 'munged.log'}",
                f"--pid-file={run / 'munged.pid'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            self.logs / "munged.log",
        )  # fmt: skip
        self._until(lambda: sock.exists(), "munged made no socket", [munged])
        node_line = _node_line()
        self.node = node_line.split()[0].removeprefix("NodeName=")
        for d in ("state", "spool"):
            (self.dir / d).mkdir()
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=rollpointtest",
                    "SlurmctldHost=localhost",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={sock},cred_expire={CRED_EXPIRE_S}",
                    "MpiDefault=none",
                    # rollpoint keeps its sandboxes in cgroups of its own.
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobRequeue=1",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    f"KillWait={KILL_WAIT_S}",
                    "ReturnToService=2",
                    "SchedulerType=sched/backfill",
                    "SchedulerParameters=sched_interval=2,bf_interval=1",
                    "AccountingStorageType=accounting_storage/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "JobCompType=jobcomp/none",
                    "MailProg=/bin/true",
                    f"StateSaveLocation={self.dir / 'state'}",
                    f"SlurmdSpoolDir={self.dir / 'spool'}",
                    f"SlurmctldPidFile={run / 'slurmctld.pid'}",
                    f"SlurmdPidFile={run / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.logs / 'slurmctld.log'}",
                    f"SlurmdLogFile={self.logs / 'slurmd.log'}",
                    "SlurmctldDebug=info",
                    "SlurmdDebug=info",
                    f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
                    f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        ctld = self._spawn(
            "slurmctld",
            ["slurmctld", "-D", "-f", str(self.conf)],
            self.logs / "slurmctld.log",
        )
        self._until(
            lambda: self.command("scontrol", "ping", check=False).returncode == 0,
            "slurmctld does not answer scontrol ping",
            [munged, ctld],
        )
        slurmd = self._spawn(
            "slurmd", ["slurmd", "-D", "-f", str(self.conf)], self.logs / "slurmd.log"
        )
        self._until(
            lambda: (
                self.command("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.strip() == "idle"
            ),
            f"node {self.node} never became idle",
            [munged, ctld, slurmd],
        )

    def _until(self, ready: Callable[[], bool], what: str, watch: Sequence[Daemon]) -> None:
        end = time.monotonic() + START_S
        while not ready():
            for d in watch:
                if d.child.poll() is not None:
                    self.fail(f"{d.name} exited {d.child.returncode} while starting ({what})")
            if time.monotonic() > end:
                self.fail(f"{what} within {START_S:.0f} s")
            time.sleep(0.2)

    # Talking to it.

    def command(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Runs a Slurm command against this cluster (``SLURM_CONF`` set)."""
        done = subprocess.run(
            list(args),
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            self.fail(f"{' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
        return done

    def sbatch(self, script: Path, *options: str, env: Mapping[str, str] | None = None) -> int:
        """Submits ``script`` with ``options``; ``env`` is added to the environment the job
        gets (sbatch passes its own environment on). Returns the job id."""
        done = subprocess.run(
            ["sbatch", "--parsable", *options, str(script)],
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            self.fail(f"sbatch exited {done.returncode}: {done.stdout}{done.stderr}")
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job`` as fields (JobState, Reason, Restarts, ExitCode, ...)."""
        out = self.command("scontrol", "-o", "show", "job", str(job_id)).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(
        self,
        job_id: int,
        done: Callable[[dict[str, str]], bool],
        what: str,
        limit_s: float,
        extra: Callable[[], str] = str,
    ) -> dict[str, str]:
        """Polls the job until ``done(fields)`` holds; fails after ``limit_s`` with the job's
        fields, ``extra()`` (say, its output) and the daemons' log tails."""
        end = time.monotonic() + limit_s
        while True:
            fields = self.job(job_id)
            if done(fields):
                return fields
            if time.monotonic() > end:
                self.fail(
                    f"job {job_id}: {what} not within {limit_s:.0f} s; JobState="
                    f"{fields.get('JobState')} Reason={fields.get('Reason')} "
                    f"Restarts={fields.get('Restarts')}\n{extra()}"
                )
            time.sleep(0.5)

    def tails(self) -> str:
        return "\n".join(f"=== {d.name}\n{d.tail()}" for d in self.daemons)

    def fail(self, message: str) -> NoReturn:
        pytest.fail(f"{message}\n{self.tails()}", pytrace=False)

    # Stopping.

    def stop(self) -> None:
        """Cancels every job (waiting out KillWait), stops the daemons, kills what jobs
        left behind and removes the directory."""
        ctld = next((d for d in self.daemons if d.name == "slurmctld"), None)
        if ctld is not None and ctld.child.poll() is None:
            with suppress(subprocess.SubprocessError, OSError):
                jobs = self.command("squeue", "-h", "-o", "%i", check=False).stdout.split()
                if jobs:
                    self.command("scancel", *jobs, check=False)
                end = time.monotonic() + KILL_WAIT_S + 30
                while (
                    time.monotonic() < end
                    and self.command("squeue", "-h", "-o", "%i", check=False).stdout.strip()
                ):
                    time.sleep(0.5)
        for d in reversed(self.daemons):
            if d.child.poll() is None:
                d.child.send_signal(signal.SIGTERM)
            try:
                d.child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                d.child.kill()
                d.child.wait()
        for pid in _processes_under(self.dir):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


def _check_installed() -> None:
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        pytest.fail(
            f"the Slurm tests start a private cluster and need {', '.join(missing)}: "
            "apt-get install slurm-wlm munge (scripts/install-deps installs them)",
            pytrace=False,
        )
    if os.geteuid() != 0:
        pytest.fail("the Slurm tests run slurmd and munged as root", pytrace=False)


@contextmanager
def running_cluster() -> Iterator[SlurmCluster]:
    """A private one-node cluster, up and idle; torn down on the way out, failure or not."""
    _check_installed()
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="rpslurm-", dir="/tmp")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
