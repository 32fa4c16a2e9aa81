"""rollpoint's container image under podman (deploy/container/Containerfile, scripts/build-image).

The image is built from the binaries under target/ as the test command builds them (the debug
``rollpoint``, the static ``rollpoint-supervisor`` and ``rollpoint-worker``) on a Debian base
made here with debootstrap, so no registry is needed (``scripts/build-image --base local``: the
base is cached under /var/lib/rollpoint/image-base and reused by the next run). Then the example
the image carries (examples/tasks.jsonl with examples/run.toml) runs inside it under podman with
the privileges the deploy documentation lists, not ``--privileged``: once on the copy store
(podman's default capabilities and two more, no loop device) and once on the btrfs store (the
smallest capability set, the loop devices added), each with a verified row
for every task, ``rollpoint status`` inside saying it is done, and nothing left on the host.

Nothing skips: a missing tool or binary fails the test naming what to install or build. The
containers and the image are removed at the end; the debootstrap base stays cached.

Time (two cores): the first debootstrap about 50 s, the build about 10 s, each run about 11 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
from support import remove_tree, short_tmpdir

REPO = Path(__file__).resolve().parents[2]
TAG = "localhost/rollpoint:test"
# What scripts/test builds: `cargo build --workspace --bins` and scripts/build-static.
ROLLPOINT = REPO / "target/debug/rollpoint"
STATIC = REPO / "target/x86_64-unknown-linux-musl/release"
IN_IMAGE_SUPERVISOR = "/usr/local/lib/rollpoint/rollpoint-supervisor"
IN_IMAGE_WORKER = "/usr/local/lib/rollpoint/rollpoint-worker"
EXAMPLES = "/usr/share/rollpoint/examples"
RUN_DIR = "/var/lib/rollpoint/run"
BUILD_LIMIT_S = 1200.0
RUN_LIMIT_S = 300.0


def fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


def workspace_version() -> str:
    section = ""
    for line in (REPO / "Cargo.toml").read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        elif section == "[workspace.package]" and line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    fail("Cargo.toml has no [workspace.package] version")


def sh(args: list[str], limit_s: float, what: str) -> subprocess.CompletedProcess[bytes]:
    """Runs ``args``; a failure or a timeout fails the test with the output."""
    try:
        done = subprocess.run(args, capture_output=True, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        fail(f"{what}: no end within {limit_s} s: {args}\n{out.decode(errors='replace')[-6000:]}")
    if done.returncode != 0:
        fail(
            f"{what}: exit {done.returncode}: {args}\n"
            f"{(done.stdout + done.stderr).decode(errors='replace')[-6000:]}"
        )
    return done


def host_flags() -> list[str]:
    """What this host needs on every ``podman run``, beyond the image's own privileges.

    - crun 1.8 refuses a hybrid cgroup host whose cgroup2 hierarchy holds any controller
      ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"): runc.
    - A root without CAP_SYS_RESOURCE (as in this test VM) cannot raise the container's
      RLIMIT_NOFILE and RLIMIT_NPROC to what podman asks by default ("setrlimit
      RLIMIT_NOFILE: Operation not permitted"): both are set to the caller's hard limits,
      RLIMIT_NPROC to at most 32768 (podman lowers its own hard limit to that when it starts).
    """
    flags: list[str] = []
    controllers = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    if controllers.exists() and controllers.read_text().strip():
        if shutil.which("runc") is None:
            fail(
                "crun refuses this hybrid cgroup host (cgroup2 has controllers) and runc is "
                "missing: apt-get install runc (scripts/install-deps installs it)"
            )
        flags += ["--runtime", "runc"]
    cap_eff = next(
        int(line.split()[1], 16)
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("CapEff:")
    )
    cap_sys_resource = 24
    if not cap_eff & (1 << cap_sys_resource):
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
        flags += ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    return flags


def loop_flags() -> list[str]:
    """The btrfs store's loop devices: loop-control and every loop device of the host.

    ``mount -o loop`` takes a free one among the nodes the container has; ``losetup -f``
    first makes sure one is free (it adds a node when all are in use).
    """
    sh(["losetup", "-f"], 30, "find a free loop device")
    devices = sorted(
        p for p in Path("/dev").glob("loop[0-9]*") if p.name[4:].isdigit() and p.is_block_device()
    )
    flags = ["--device", "/dev/loop-control"]
    for d in devices:
        flags += ["--device", str(d)]
    return flags


# The documented privileges (docs/design/deploy.md), each with its reason. The copy store's
# run takes podman's default capabilities and adds two; the btrfs run takes the smallest set.
CGROUPS_AND_NETWORK = [
    # The sandboxes' cgroups (freezer, memory, pids; cgroup.freeze and cgroup.kill in v2) are
    # made beside the container's, in the host's hierarchies, which podman mounts read-only.
    "--cgroupns",
    "host",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    # The example needs no network beyond the container's loopback (scripted model).
    "--network",
    "none",
]
COPY_STORE_FLAGS = [
    # Mounts (the overlays, /proc, /sys and /dev of each sandbox, pivot_root), the overlay's
    # trusted.* xattrs (opaque directories), setns, the idmapped layers.
    "--cap-add",
    "SYS_ADMIN",
    # Each sandbox's network namespace: bringing up its loopback, its gateway listener.
    "--cap-add",
    "NET_ADMIN",
    *CGROUPS_AND_NETWORK,
]
# Of podman's defaults: CHOWN, DAC_OVERRIDE, FOWNER (the uppers and uploads in the run's id
# range), SETUID and SETGID (the run's user namespace map).
SMALLEST_CAPS = ["--cap-drop", "ALL", "--cap-add", "CHOWN,DAC_OVERRIDE,FOWNER,SETUID,SETGID"]
BTRFS_STORE_FLAGS = [*SMALLEST_CAPS, "--cap-add", "SYS_ADMIN,NET_ADMIN", *CGROUPS_AND_NETWORK]


@dataclass
class Image:
    tag: str
    host_flags: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    containers: list[str] = field(default_factory=list)

    def podman_run(
        self,
        flags: list[str],
        args: list[str],
        *,
        entrypoint: str | None = None,
        limit_s: float = RUN_LIMIT_S,
        what: str,
    ) -> subprocess.CompletedProcess[bytes]:
        name = f"rollpoint-test-{uuid.uuid4().hex[:12]}"
        self.containers.append(name)
        cmd = ["podman", "run", "--rm", "--name", name, *self.host_flags, *flags]
        if entrypoint is not None:
            cmd += ["--entrypoint", entrypoint]
        return sh([*cmd, self.tag, *args], limit_s, what)


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    if os.geteuid() != 0:
        fail("the image test builds with buildah and runs podman as root")
    missing = [t for t in ("buildah", "podman", "debootstrap", "losetup") if not shutil.which(t)]
    if missing:
        fail(
            f"missing {', '.join(missing)}: apt-get install podman buildah crun runc debootstrap "
            "(scripts/install-deps installs them)"
        )
    for path, build in (
        (ROLLPOINT, "cargo build -p rollpoint"),
        (STATIC / "rollpoint-supervisor", "scripts/build-static"),
        (STATIC / "rollpoint-worker", "scripts/build-static"),
    ):
        if not (path.is_file() and os.access(path, os.X_OK)):
            fail(f"{path} is missing: build it with `{build}` (scripts/test builds both)")
    img = Image(TAG, host_flags())
    started = time.monotonic()
    built = sh(
        [
            str(REPO / "scripts/build-image"),
            "--base",
            "local",
            "--profile",
            "debug",
            "--tag",
            TAG,
        ],
        BUILD_LIMIT_S,
        "scripts/build-image",
    )
    img.timings["build_image_s"] = time.monotonic() - started
    log = built.stderr.decode(errors="replace")
    for line in log.splitlines():
        # "== debootstrap: 45.9 s" (a first run only), "== buildah build: 9.0 s".
        if line.startswith("== ") and line.endswith(" s") and ": " in line:
            phase, secs = line[3:].rsplit(": ", 1)
            img.timings[phase.split()[0]] = float(secs[:-2])
    try:
        yield img
    finally:
        for name in img.containers:
            subprocess.run(["podman", "rm", "-f", "-v", name], capture_output=True, check=False)
        subprocess.run(["podman", "rmi", "-f", TAG], capture_output=True, check=False)
        print(f"image test timings (s): {json.dumps(img.timings)}")


def elf_interpreter(data: bytes) -> str | None:
    """The PT_INTERP of a 64-bit little-endian ELF executable (None: static)."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    assert data[4:6] == b"\x02\x01", "not ELF64 little-endian"
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == 3:  # PT_INTERP
            return data[p_offset : p_offset + p_filesz].rstrip(b"\0").decode()
    return None


def test_the_image_reports_its_version_and_carries_the_static_binaries(image: Image) -> None:
    version = workspace_version()
    out = image.podman_run([], ["--version"], what="rollpoint --version").stdout.decode()
    assert out.strip() == f"rollpoint {version}"
    host = subprocess.run([ROLLPOINT, "--version"], capture_output=True, check=True)
    assert out == host.stdout.decode()

    inspect = sh(["podman", "image", "inspect", image.tag], 60, "podman image inspect")
    config = json.loads(inspect.stdout)[0]["Config"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["ROLLPOINT_SUPERVISOR"] == IN_IMAGE_SUPERVISOR
    assert env["ROLLPOINT_WORKER_BIN"] == IN_IMAGE_WORKER
    assert config["Entrypoint"][-1] == "rollpoint"
    assert config["Labels"]["org.opencontainers.image.version"] == version
    assert config["Labels"]["org.opencontainers.image.base.name"].startswith(
        "localhost/rollpoint-base:debian-"
    )

    for in_image, host_file in (
        (IN_IMAGE_SUPERVISOR, STATIC / "rollpoint-supervisor"),
        (IN_IMAGE_WORKER, STATIC / "rollpoint-worker"),
    ):
        data = image.podman_run([], [in_image], entrypoint="cat", what=f"cat {in_image}").stdout
        assert elf_interpreter(data) is None, f"{in_image} is dynamically linked"
        assert hashlib.sha256(data).digest() == hashlib.sha256(host_file.read_bytes()).digest()
    # The example's relative model_script is beside its config in the image.
    listing = image.podman_run([], [EXAMPLES], entrypoint="ls", what="ls examples").stdout
    assert {"tasks.jsonl", "run.toml", "model-script.json"} <= set(listing.decode().split())


def example_tasks() -> list[str]:
    lines = (REPO / "examples/tasks.jsonl").read_text().splitlines()
    return [json.loads(line)["task"]["id"] for line in lines if line.strip()]


def host_cgroups(key: str) -> list[str]:
    """The host's cgroups of the run's sandboxes (``rollpoint/sandbox-<key>-<id>``)."""
    left = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        parent = hierarchy / "rollpoint"
        if parent.is_dir():
            left += [str(p) for p in parent.glob(f"sandbox-{key}-*")]
    return left


def run_example(image: Image, flags: list[str], extra: list[str], label: str) -> dict[str, Any]:
    """Runs the example in the image with ``flags``; returns what the checks need."""
    host_dir = short_tmpdir("rpi")
    try:
        volume = ["-v", f"{host_dir}:/var/lib/rollpoint"]
        started = time.monotonic()
        image.podman_run(
            [*flags, *volume],
            [
                "run",
                f"{EXAMPLES}/tasks.jsonl",
                "--config",
                f"{EXAMPLES}/run.toml",
                "--run-dir",
                RUN_DIR,
                *extra,
            ],
            what=f"rollpoint run ({label})",
        )
        image.timings[f"run_{label}_s"] = time.monotonic() - started
        run_dir = host_dir / "run"
        rows = [
            json.loads(line)
            for line in (run_dir / "results.jsonl").read_text().splitlines()
            if line.strip()
        ]
        # `status` reads the run directory: no privilege at all.
        status = image.podman_run(
            [*volume, "--network", "none"], ["status", RUN_DIR], what="rollpoint status"
        ).stdout.decode()
        status_json = json.loads(
            image.podman_run(
                [*volume, "--network", "none"],
                ["status", "--json", RUN_DIR],
                what="rollpoint status --json",
            ).stdout
        )
        store = json.loads(next(run_dir.rglob("store.json")).read_text())["store"]
        image_file = next(run_dir.rglob("btrfs.img"), None)
        loops = (
            subprocess.run(
                ["losetup", "-j", str(image_file)], capture_output=True, text=True, check=True
            ).stdout
            if image_file is not None
            else ""
        )
        key = hashlib.sha256(f"{RUN_DIR}/owner".encode()).hexdigest()[:12]
        return {
            "rows": rows,
            "status": status,
            "status_json": status_json,
            "store": store,
            "loops": loops,
            "cgroups": host_cgroups(key),
        }
    finally:
        remove_tree(host_dir)


def check_run(result: dict[str, Any], store: str) -> None:
    tasks = example_tasks()
    rows = result["rows"]
    by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in tasks}
    for row in rows:
        assert row["task_id"] in by_task, f"a row for a task not in the example: {row['task_id']}"
        by_task[row["task_id"]].append(row)
    for task, found in by_task.items():
        assert len(found) == 1, f"{task}: {len(found)} rows"
        row = found[0]
        assert row["status"] == "verified", f"{task}: {row['status']}: {row['error']}"
        assert row["verdict"]["passed"] is True, f"{task}: {row['verdict']}"
    assert result["store"] == store
    assert f"done: {len(tasks)}, verified {len(tasks)}" in result["status"], result["status"]
    assert "not finished: 0" in result["status"], result["status"]
    doc = result["status_json"]
    assert doc["tasks"] == doc["done"] == len(tasks)
    assert doc["by_status"] == {"verified": len(tasks)}
    assert doc["unfinished"] == []
    # Nothing of the run is left on the host: no loop device, no cgroup.
    assert result["loops"] == "", result["loops"]
    assert result["cgroups"] == [], result["cgroups"]


def test_the_example_runs_on_the_copy_store(image: Image) -> None:
    check_run(run_example(image, COPY_STORE_FLAGS, ["--store", "copy"], "copy"), "copy")


def test_the_example_runs_on_the_btrfs_store(image: Image) -> None:
    # As examples/run.toml says (store = "auto"): btrfs, since the loop devices are there.
    check_run(run_example(image, [*BTRFS_STORE_FLAGS, *loop_flags()], [], "btrfs"), "btrfs")
