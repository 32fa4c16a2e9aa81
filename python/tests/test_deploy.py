"""The deployment files, each checked by the tool that reads it and against the rollpoint
binary that runs in it.

- Kubernetes (deploy/kubernetes/base and overlays/example): `kubectl kustomize` renders them and
  kubernetes-validate checks every document strictly (a field the schema does not define is an
  error) against the schemas of Kubernetes 1.37.0, the newest kubernetes-validate 1.37 ships.
  Then what they say: the kinds, the overlay's image, store URL, replicas and nodes, the Secret
  files' modes (the init containers' scripts are run for real on a copy of the Secret volumes'
  layout), which container is privileged, every flag against `rollpoint ... --help`, and the
  readiness probes against the real services started on loopback.
- KubeRay (deploy/kubernetes/kuberay/raycluster.yaml): no PyPI package ships the RayCluster
  CRD's OpenAPI schema, so each pod template inside it (the head's and every worker group's) is
  validated as a core PodTemplateSpec, wrapped in a PodTemplate, with kubernetes-validate, and
  the RayCluster's own fields against the shape of KubeRay's ray.io/v1 types; the driver in its
  ConfigMap against rollpoint.ray.RollpointCluster.
- SkyPilot (examples/skypilot/rollpoint.yaml): loaded by SkyPilot's own parser,
  `sky.Task.from_yaml`, in the venv scripts/install-deps makes for it (SkyPilot pins click below
  the version the packages of this environment use).

Nothing here skips: without kubectl, the rollpoint binary or the SkyPilot venv, a test fails and
says what is missing.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from support import Services, binaries

from rollpoint.ray import RollpointCluster

Doc = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAY = KUBERNETES / "overlays" / "example"
RAYCLUSTER = KUBERNETES / "kuberay" / "raycluster.yaml"
SKYPILOT = ROOT / "examples" / "skypilot" / "rollpoint.yaml"
SKYPILOT_VENV = Path(os.environ.get("ROLLPOINT_SKYPILOT_VENV", "/var/lib/rollpoint/skypilot-venv"))

KUBERNETES_VERSION = "1.37.0"
IMAGE = "ghcr.io/rollpoint/rollpoint"
OVERLAY_IMAGE = "registry.example.com/ml/rollpoint:0.1.0"
OVERLAY_STORE = "s3://my-bucket/rollpoint/run-1"
OVERLAY_NODES = ["10.0.0.11", "10.0.0.12"]
STORE_SECRET = "rollpoint-store"
TOKENS_SECRET = "rollpoint-tokens"

BASE_KINDS = Counter(
    {
        "Namespace": 1,
        "ConfigMap": 1,
        "Secret": 2,
        "PersistentVolumeClaim": 1,
        "DaemonSet": 1,
        "Deployment": 2,
        "Service": 2,
    }
)
# The overlay leaves the placeholder Secrets out: the real ones are never overwritten.
OVERLAY_KINDS = BASE_KINDS - Counter({"Secret": 2})

# What each rollpoint container runs: `rollpoint serve ROLE`.
ROLES = {"owner": "owner", "agent": "agent", "gateway": "gateway", "coordinator": "coordinator"}

# The fields of KubeRay's ray.io/v1 RayClusterSpec, HeadGroupSpec and WorkerGroupSpec
# (ray-operator/apis/ray/v1/raycluster_types.go), the required ones as the CRD requires them.
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_TEMPLATE = {"type": "object", "required": ["spec"]}
_COUNT = {"type": "integer", "minimum": 0}
RAYCLUSTER_SCHEMA: Doc = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayCluster"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["headGroupSpec"],
            "additionalProperties": False,
            "properties": {
                "headGroupSpec": {
                    "type": "object",
                    "required": ["rayStartParams", "template"],
                    "additionalProperties": False,
                    "properties": {
                        "serviceType": {"type": "string"},
                        "headService": {"type": "object"},
                        "enableIngress": {"type": "boolean"},
                        "rayStartParams": _STRINGS,
                        "template": _TEMPLATE,
                    },
                },
                "workerGroupSpecs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": [
                            "groupName",
                            "minReplicas",
                            "maxReplicas",
                            "rayStartParams",
                            "template",
                        ],
                        "additionalProperties": False,
                        "properties": {
                            "groupName": {"type": "string", "minLength": 1},
                            "replicas": _COUNT,
                            "minReplicas": _COUNT,
                            "maxReplicas": _COUNT,
                            "numOfHosts": {"type": "integer", "minimum": 1},
                            "idleTimeoutSeconds": {"type": "integer"},
                            "suspend": {"type": "boolean"},
                            "rayStartParams": _STRINGS,
                            "template": _TEMPLATE,
                            "scaleStrategy": {"type": "object"},
                        },
                    },
                },
                "rayVersion": {"type": "string"},
                "enableInTreeAutoscaling": {"type": "boolean"},
                "autoscalerOptions": {"type": "object"},
                "headServiceAnnotations": _STRINGS,
                "gcsFaultToleranceOptions": {"type": "object"},
                "managedBy": {"type": "string"},
                "suspend": {"type": "boolean"},
            },
        },
    },
}

# Run in the SkyPilot venv: the task as SkyPilot's parser makes it, as JSON.
SKYPILOT_PROBE = """
import json, sys
import sky
from sky.utils import yaml_utils

path = sys.argv[1]
task = sky.Task.from_yaml(path)
with open(path, encoding="utf-8") as f:
    config = yaml_utils.safe_load(f.read())
given = sky.Task.from_yaml_config(config, secrets_overrides=[("MODEL_API_KEY", "probe")])
json.dump({
    "version": sky.__version__,
    "name": task.name,
    "setup": task.setup,
    "run": task.run,
    "envs": dict(task.envs),
    "secret_refs": [ref.name for ref in task.managed_secret_refs],
    "secrets_given": sorted(given.secrets),
    "file_mounts": task.file_mounts,
    "storage_mounts": {
        path: {"source": s.source, "mode": s.mode.value, "persistent": s.persistent}
        for path, s in task.storage_mounts.items()
    },
    "resources": [
        {
            "use_spot": r.use_spot,
            "job_recovery": r.job_recovery,
            "cpus": r.cpus,
            "memory": r.memory,
            "disk_size": r.disk_size,
        }
        for r in task.resources
    ],
}, sys.stdout)
"""


# Rendering and validating.


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl is not on PATH: the Kubernetes manifests are rendered with "
            "`kubectl kustomize` (a kubectl whose kustomize is v5, e.g. /usr/bin/kubectl)",
            pytrace=False,
        )
    return found


def render(directory: Path) -> list[Doc]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"kubectl kustomize {directory.relative_to(ROOT)} exited {done.returncode}:\n"
            f"{done.stderr}",
            pytrace=False,
        )
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def validate(doc: Doc, where: str) -> None:
    """Strict validation against Kubernetes KUBERNETES_VERSION's schema of the document's kind."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        at = ".".join(str(p) for p in e.absolute_path) or "(top)"
        pytest.fail(
            f"{where}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}: at {at}: "
            f"{e.message}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def base() -> list[Doc]:
    return render(BASE)


@pytest.fixture(scope="module")
def overlay() -> list[Doc]:
    return render(OVERLAY)


def one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]


def pod(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def containers(docs: list[Doc]) -> Iterator[tuple[Doc, Doc, bool]]:
    """Every container of every workload: (workload, container, is an init container)."""
    for w in workloads(docs):
        for c in pod(w).get("initContainers", []):
            yield w, c, True
        for c in pod(w)["containers"]:
            yield w, c, False


def rollpoint_containers(docs: list[Doc]) -> dict[str, tuple[Doc, Doc]]:
    """The containers running `rollpoint serve ROLE`, by name."""
    found = {c["name"]: (w, c) for w, c, init in containers(docs) if not init}
    assert set(found) == set(ROLES), sorted(found)
    for name, (_, c) in found.items():
        assert c["args"][:2] == ["serve", ROLES[name]], (name, c["args"][:2])
        # The image's entrypoint (tini -- rollpoint) runs them: no command of their own.
        assert "command" not in c, name
    return found


def environment(container: Doc, docs: list[Doc]) -> dict[str, str]:
    """The container's environment as the kubelet makes it from the rendered objects; a
    downward-API field, known only on a node, stands as `<fieldPath>`."""
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        source = var["valueFrom"]
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            assert ref["key"] in maps.get(ref["name"], {}), f"{var['name']}: no {ref}"
            env[var["name"]] = maps[ref["name"]][ref["key"]]
        elif "fieldRef" in source:
            env[var["name"]] = f"<{source['fieldRef']['fieldPath']}>"
        else:
            pytest.fail(f"{container['name']}: {var['name']} from {source}")
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    """`$(VAR)` as the kubelet expands it in args; a variable the container lacks is an error
    here (the kubelet would leave the text as it is)."""

    def value(m: re.Match[str]) -> str:
        assert m.group(1) in env, f"{arg}: $({m.group(1)}) is not in the container's env"
        return env[m.group(1)]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value, arg)


def flags(container: Doc, docs: list[Doc]) -> dict[str, list[str]]:
    """`--name=value` (and bare `--name`) arguments after `serve ROLE`, expanded, by name."""
    env = environment(container, docs)
    out: dict[str, list[str]] = {}
    for arg in container["args"][2:]:
        assert arg.startswith("--"), f"{container['name']}: {arg!r} is not --name[=value]"
        name, _, value = expand(arg, env).partition("=")
        out.setdefault(name, []).append(value)
    return out


def flag(container: Doc, docs: list[Doc], name: str) -> str:
    values = flags(container, docs)[name]
    assert len(values) == 1, (container["name"], name, values)
    return values[0]


# The rollpoint binary.


def rollpoint() -> Path:
    given = os.environ.get("ROLLPOINT_BIN")
    path = Path(given) if given else ROOT / "target" / "debug" / "rollpoint"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"the rollpoint binary {path} is not there: build it (cargo build) or set "
            "ROLLPOINT_BIN (scripts/test does)",
            pytrace=False,
        )
    return path


@functools.cache
def accepted(*command: str) -> frozenset[str]:
    """The long flags `rollpoint COMMAND... --help` lists."""
    done = subprocess.run(
        [str(rollpoint()), *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = frozenset(re.findall(r"(?m)^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", done.stdout))
    assert "--help" in found, done.stdout
    return found


def status_without_token(port: int, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        status: int = reply.status
        return status


# Kubernetes.


def test_kubernetes_validate_has_the_version() -> None:
    assert KUBERNETES_VERSION in kubernetes_validate.utils.all_versions()


def test_base_renders_documents_valid_for_kubernetes(base: list[Doc]) -> None:
    for doc in base:
        validate(doc, "base")
    assert Counter(d["kind"] for d in base) == BASE_KINDS
    assert {(d["kind"], d["metadata"]["name"]) for d in base} == {
        ("Namespace", "rollpoint"),
        ("ConfigMap", "rollpoint-settings"),
        ("Secret", STORE_SECRET),
        ("Secret", TOKENS_SECRET),
        ("PersistentVolumeClaim", "rollpoint-gateway"),
        ("DaemonSet", "rollpoint-node"),
        ("Deployment", "rollpoint-gateway"),
        ("Deployment", "rollpoint-coordinator"),
        ("Service", "rollpoint-gateway"),
        ("Service", "rollpoint-coordinator"),
    }
    for doc in base:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "rollpoint", doc
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "rollpoint", doc["metadata"]
    # The namespace admits the privileged node pods.
    namespace = one(base, "Namespace", "rollpoint")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # Every container runs the placeholder image the kustomization's `images:` rewrites.
    images = {c["image"] for _, c, _ in containers(base)}
    assert images == {f"{IMAGE}:latest"}
    # Placeholders are marked as such, and the route key's cannot be taken for a key.
    text = yaml.safe_dump_all(base)
    assert "REPLACE-ME" in one(base, "ConfigMap", "rollpoint-settings")["data"]["checkpoint-store"]
    assert "PLACEHOLDER" in one(base, "Secret", STORE_SECRET)["stringData"]["options"]
    assert all("REPLACE-ME" in v for v in one(base, "Secret", TOKENS_SECRET)["stringData"].values())
    assert text.count("REPLACE-ME-NODE-ADDRESS") == 2


def test_overlay_sets_the_image_the_store_the_replicas_and_the_nodes(
    overlay: list[Doc],
) -> None:
    for doc in overlay:
        validate(doc, "overlay")
    assert Counter(d["kind"] for d in overlay) == OVERLAY_KINDS
    # No placeholder is left in what the overlay applies.
    assert "REPLACE-ME" not in yaml.safe_dump_all(overlay)
    assert {c["image"] for _, c, _ in containers(overlay)} == {OVERLAY_IMAGE}
    settings = one(overlay, "ConfigMap", "rollpoint-settings")
    assert settings["data"]["checkpoint-store"] == OVERLAY_STORE
    # The store URL reaches every service that writes or publishes a checkpoint share.
    served = rollpoint_containers(overlay)
    for name, (_, c) in served.items():
        assert flag(c, overlay, "--checkpoint-store") == OVERLAY_STORE, name
    for name in ("rollpoint-gateway", "rollpoint-coordinator"):
        deployment = one(overlay, "Deployment", name)
        assert deployment["spec"]["replicas"] == 1
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    coordinator = served["coordinator"][1]
    participants = flags(coordinator, overlay)["--participant"]
    gateway_url = f"http://rollpoint-gateway:{port_of(served['gateway'][1], overlay)}"
    owner_port = port_of(served["owner"][1], overlay)
    agent_port = port_of(served["agent"][1], overlay)
    assert participants == [f"model={gateway_url}"] + [
        p
        for node in OVERLAY_NODES
        for p in (f"agent=http://{node}:{agent_port}", f"resources=http://{node}:{owner_port}")
    ]


def port_of(container: Doc, docs: list[Doc]) -> int:
    """The port `--listen` binds, which must be the container's one declared port."""
    host, _, port = flag(container, docs, "--listen").rpartition(":")
    assert host == "0.0.0.0", container["name"]
    declared = [p["containerPort"] for p in container["ports"]]
    assert declared == [int(port)], (container["name"], declared, port)
    return int(port)


def test_every_flag_is_one_the_binary_takes(base: list[Doc], overlay: list[Doc]) -> None:
    for docs in (base, overlay):
        for name, (_, c) in rollpoint_containers(docs).items():
            unknown = set(flags(c, docs)) - accepted("serve", ROLES[name])
            assert not unknown, f"{name}: rollpoint serve {ROLES[name]} takes no {unknown}"
            # What the store flags need: the URL, and the options file they read.
            assert flag(c, docs, "--checkpoint-store").startswith(("s3://", "gs://", "az://"))
            assert flag(c, docs, "--checkpoint-store-options").startswith("/")


def test_node_runs_owner_and_agent_on_the_node(base: list[Doc]) -> None:
    served = rollpoint_containers(base)
    daemonset, owner = served["owner"]
    assert daemonset["kind"] == "DaemonSet"
    assert served["agent"][0] is daemonset
    agent = served["agent"][1]
    spec = pod(daemonset)
    # The agent waits up to 120 s for its rollouts to end on SIGTERM: the kubelet's SIGKILL
    # comes after that.
    assert spec["terminationGracePeriodSeconds"] >= 120
    assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    for c, role in ((owner, "owner"), (agent, "agent")):
        assert flag(c, base, "--instance") == f"{role}-<spec.nodeName>"
        assert flag(c, base, "--run-dir") == "/var/lib/rollpoint"
        assert mount_of(c, spec, "/var/lib/rollpoint") == {
            "hostPath": {"path": "/var/lib/rollpoint", "type": "DirectoryOrCreate"}
        }
        # Reached at the node's address: the host port is the listening port.
        port = port_of(c, base)
        assert [p["hostPort"] for p in c["ports"]] == [port]
    assert mount_of(owner, spec, "/sys/fs/cgroup") == {
        "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}
    }
    assert flag(agent, base, "--owner") == f"http://127.0.0.1:{port_of(owner, base)}"
    gateway_port = port_of(served["gateway"][1], base)
    for c in (owner, agent):
        assert flag(c, base, "--gateway") == f"http://rollpoint-gateway:{gateway_port}"
    assert flag(agent, base, "--route-key-file") == "/etc/rollpoint/tokens/route.key"
    assert spec["nodeSelector"] == {"rollpoint.dev/node": "true"}


def mount_of(container: Doc, spec: Doc, path: str) -> Doc:
    """The volume source mounted at exactly `path` in the container."""
    mounts = [m for m in container["volumeMounts"] if m["mountPath"] == path]
    assert len(mounts) == 1, (container["name"], path)
    volumes = {v["name"]: v for v in spec["volumes"]}
    source = dict(volumes[mounts[0]["name"]])
    source.pop("name")
    return source


def volume_holding(container: Doc, spec: Doc, path: str) -> tuple[Doc, Doc]:
    """(the mount, the volume) whose mount path holds `path`."""
    mounts = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert len(mounts) == 1, (container["name"], path, mounts)
    volumes = {v["name"]: v for v in spec["volumes"]}
    return mounts[0], volumes[mounts[0]["name"]]


def test_only_the_owner_container_is_privileged(base: list[Doc]) -> None:
    seen = set()
    for w, c, init in containers(base):
        context = c.get("securityContext", {})
        seen.add(c["name"])
        if c["name"] == "owner":
            assert context == {"privileged": True}
            continue
        assert not context.get("privileged", False), c["name"]
        assert context["allowPrivilegeEscalation"] is False, c["name"]
        assert context["readOnlyRootFilesystem"] is True, c["name"]
        assert context["capabilities"]["drop"] == ["ALL"], c["name"]
        # Only the init containers add one: CHOWN, to hand the secret copies over.
        assert context["capabilities"].get("add", []) == (["CHOWN"] if init else []), c["name"]
        if w["kind"] == "Deployment":
            # The gateway and the coordinator run as a user that is not root.
            pod_context = pod(w)["securityContext"]
            assert pod_context["runAsNonRoot"] is True
            assert pod_context["runAsUser"] != 0
            assert ("runAsUser" in context) == init, c["name"]
    assert seen == {"owner", "agent", "gateway", "coordinator", "secrets"}
    for w in workloads(base):
        spec = pod(w)
        assert spec["automountServiceAccountToken"] is False
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(field, False), (w["metadata"]["name"], field)


def test_the_store_secret_is_mounted_0400(base: list[Doc], overlay: list[Doc]) -> None:
    for docs in (base, overlay):
        for w in workloads(docs):
            for volume in pod(w)["volumes"]:
                if "secret" in volume:
                    assert volume["secret"]["defaultMode"] == 0o400, w["metadata"]["name"]
        # Each service reads its options file either straight from the Secret volume (the node,
        # as root, whose files they are: no fsGroup, which would add group read) or from a
        # memory-backed copy its init container makes (checked by running it, below).
        for name, (w, c) in rollpoint_containers(docs).items():
            spec = pod(w)
            path = flag(c, docs, "--checkpoint-store-options")
            mount, volume = volume_holding(c, spec, path)
            assert mount.get("readOnly") is True, name
            if "secret" in volume:
                assert volume["secret"]["secretName"] == STORE_SECRET, name
                assert "fsGroup" not in spec.get("securityContext", {}), name
                assert c.get("securityContext", {}).get("runAsUser", 0) == 0, name
            else:
                assert volume["emptyDir"]["medium"] == "Memory", name
                assert any(
                    m["name"] == mount["name"] for m in spec["initContainers"][0]["volumeMounts"]
                ), name


def secret_volume(directory: Path, data: dict[str, str], mode: int, group: int | None) -> None:
    """A Secret volume laid out as the kubelet lays it: the files in a timestamped directory,
    `..data` pointing at it, and a symlink per key; root's, `mode` (plus group read and the
    group with an fsGroup)."""
    stamp = directory / "..2026_01_01_00_00_00.000000001"
    stamp.mkdir(parents=True)
    for key, text in data.items():
        file = stamp / key
        file.write_text(text)
        os.chown(file, 0, group if group is not None else 0)
        file.chmod(mode | (0o040 if group is not None else 0))
    (directory / "..data").symlink_to(stamp.name)
    for key in data:
        (directory / key).symlink_to(f"..data/{key}")


def test_init_containers_hand_the_secrets_over_0400(base: list[Doc], tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "this test runs the init containers' scripts, which chown: run it as root "
            "(scripts/test does)",
            pytrace=False,
        )
    secrets = {d["metadata"]["name"]: d["stringData"] for d in base if d["kind"] == "Secret"}
    ran = 0
    for w in workloads(base):
        spec = pod(w)
        if not spec.get("initContainers"):
            continue
        (init,) = spec["initContainers"]
        main = spec["containers"][0]
        context = spec["securityContext"]
        uid, gid = context["runAsUser"], context["runAsGroup"]
        root = tmp_path / w["metadata"]["name"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        script = init["command"][-1]
        for m in init["volumeMounts"]:
            target = root / m["mountPath"].lstrip("/")
            volume = volumes[m["name"]]
            if "secret" in volume:
                name = volume["secret"]["secretName"]
                mode = volume["secret"]["defaultMode"]
                secret_volume(target, secrets[name], mode, context.get("fsGroup"))
            else:
                target.mkdir(parents=True)
                target.chmod(0o777)
            script = script.replace(m["mountPath"] + "/", f"{target}/")
        # Every path the script names is under one of its mounts.
        paths = re.findall(r"(?<![\w.-])/[\w./*-]+", script)
        assert paths, script
        assert all(p.startswith(f"{root}/") for p in paths), script
        assert init["command"][:2] == ["/bin/sh", "-ec"]
        subprocess.run(
            ["/bin/sh", "-ec", script], check=True, timeout=30, env={"PATH": "/usr/bin:/bin"}
        )
        copies_mount = [m for m in main["volumeMounts"] if "emptyDir" in volumes[m["name"]]]
        (secrets_mount,) = [m for m in copies_mount if m["mountPath"] == "/run/rollpoint/secrets"]
        copies = root / secrets_mount["mountPath"].lstrip("/")
        # Each file the service is given is there, its user's, readable by it alone: rollpoint
        # refuses an options or credential file whose mode lets others read it.
        given = [
            v
            for values in flags(main, base).values()
            for v in values
            if v.startswith(secrets_mount["mountPath"] + "/")
        ]
        assert given, w["metadata"]["name"]
        for path in given:
            copy = copies / Path(path).name
            stat = copy.lstat()
            assert (stat.st_mode & 0o777, stat.st_uid, stat.st_gid) == (0o400, uid, gid), path
        options = (copies / "store-options").read_text()
        assert options == secrets[STORE_SECRET]["options"]
        ran += 1
    assert ran == 2


def test_store_options_are_settings_of_an_s3_store(base: list[Doc]) -> None:
    """The options file's lines as rollpoint reads them: KEY=VALUE or `#` comments, keys being
    S3 settings (an unknown key is refused by name)."""
    text = one(base, "Secret", STORE_SECRET)["stringData"]["options"]
    keys = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, line
        assert re.fullmatch(r"[A-Za-z0-9_]+", key.strip()), line
        assert value.strip(), line
        keys.append(key.strip())
    assert keys == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"]


def test_the_route_key_placeholder_is_refused(base: list[Doc], tmp_path: Path) -> None:
    """The placeholder route key is no key: a gateway given it refuses to start (before it
    binds or opens anything), so it cannot be used by mistake."""
    key = tmp_path / "route.key"
    key.write_text(one(base, "Secret", TOKENS_SECRET)["stringData"]["route.key"])
    key.chmod(0o600)
    done = subprocess.run(
        [
            str(rollpoint()),
            "serve",
            "gateway",
            "--upstream",
            "http://127.0.0.1:9",
            "--db",
            str(tmp_path / "ledger.sqlite"),
            "--route-key-file",
            str(key),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "route key" in done.stderr, done.stderr
    assert not (tmp_path / "ledger.sqlite").exists()


def test_services_and_readiness_probes(base: list[Doc], tmp_path: Path) -> None:
    """Each Service reaches its pod's named port; each HTTP readiness probe asks a path the real
    service answers without the token (checked against the services started on loopback)."""
    served = rollpoint_containers(base)
    for name in ("gateway", "coordinator"):
        workload, c = served[name]
        service = one(base, "Service", f"rollpoint-{name}")
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        (port,) = service["spec"]["ports"]
        # The gateway's port is also the one sandboxes call at 127.0.0.1 through their relay.
        assert port["port"] == port_of(c, base)
        assert port["targetPort"] == c["ports"][0]["name"]
        assert c["readinessProbe"]["httpGet"]["port"] == c["ports"][0]["name"]
    probes = {
        name: c["readinessProbe"]["httpGet"]["path"]
        for name, (_, c) in served.items()
        if "httpGet" in c["readinessProbe"]
    }
    assert probes == {"gateway": "/metrics", "agent": "/", "coordinator": "/"}
    assert served["owner"][1]["readinessProbe"]["tcpSocket"]["port"] == "owner"

    token = tmp_path / "token"
    token.write_text("deploy-test-token\n")
    token.chmod(0o600)
    (tmp_path / "gateway").mkdir()
    services = Services(binaries(), tmp_path)
    try:
        gateway = services.start(
            "gateway",
            [
                "serve",
                "gateway",
                "--model-script",
                str(ROOT / "examples" / "model-script.json"),
                "--api",
                "all",
                "--db",
                str(tmp_path / "gateway" / "ledger.sqlite"),
                "--open-keys",
                "--run-dir",
                str(tmp_path / "gateway"),
                "--control-token-file",
                str(token),
                "--listen",
                "127.0.0.1:0",
            ],
        )
        agent = services.start(
            "agent",
            [
                "serve",
                "agent",
                "--run-dir",
                str(tmp_path / "agent"),
                "--token-file",
                str(token),
                "--owner",
                "http://127.0.0.1:9",
                "--gateway",
                f"http://127.0.0.1:{gateway}",
                "--listen",
                "127.0.0.1:0",
            ],
        )
        coordinator = services.start(
            "coordinator",
            [
                "serve",
                "coordinator",
                "--run-dir",
                str(tmp_path / "coordinator"),
                "--token-file",
                str(token),
                "--participant",
                f"model=http://127.0.0.1:{gateway}",
                "--participant",
                f"agent=http://127.0.0.1:{agent}",
                "--listen",
                "127.0.0.1:0",
            ],
        )
        ports = {"gateway": gateway, "agent": agent, "coordinator": coordinator}
        for name, path in probes.items():
            assert status_without_token(ports[name], path) == 200, (name, path)
    finally:
        services.stop()


# KubeRay.


@pytest.fixture(scope="module")
def ray_docs() -> dict[str, Doc]:
    docs = [d for d in yaml.safe_load_all(RAYCLUSTER.read_text()) if d is not None]
    assert [d["kind"] for d in docs] == ["RayCluster", "ConfigMap"]
    return {d["kind"]: d for d in docs}


def ray_templates(cluster: Doc) -> list[tuple[str, Doc]]:
    spec = cluster["spec"]
    return [("head", spec["headGroupSpec"]["template"])] + [
        (g["groupName"], g["template"]) for g in spec["workerGroupSpecs"]
    ]


def test_raycluster_has_kuberays_shape_and_valid_pod_templates(ray_docs: dict[str, Doc]) -> None:
    cluster = ray_docs["RayCluster"]
    jsonschema.validate(cluster, RAYCLUSTER_SCHEMA)
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group
    assert cluster["spec"]["enableInTreeAutoscaling"] is False
    # The RayCluster CRD's schema is in no PyPI package: each pod template is checked as a
    # core PodTemplateSpec instead, strictly, by wrapping it in a PodTemplate.
    for name, template in ray_templates(cluster):
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"raycluster-{name}", "namespace": "rollpoint"},
            "template": template,
        }
        validate(wrapped, f"RayCluster {name} pod template")
    validate(ray_docs["ConfigMap"], "kuberay")
    for doc in ray_docs.values():
        assert doc["metadata"]["namespace"] == "rollpoint"
    # The Ray version the comment's image installs is the one the cluster declares.
    pinned = re.search(r"ray\[default\]==([0-9.]+)", RAYCLUSTER.read_text())
    assert pinned is not None
    assert pinned.group(1) == cluster["spec"]["rayVersion"]


def driver_call(source: str) -> tuple[dict[str, Any], ast.Call]:
    """The driver's module-level constants and its RollpointCluster(...) call."""
    tree = ast.parse(source)
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                constants[target.id] = node.value
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "RollpointCluster"
    ]
    assert len(calls) == 1
    return constants, calls[0]


def literal(node: ast.expr, constants: dict[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return literal(constants[node.id], constants)
    return ast.literal_eval(node)


def test_ray_pods_give_rollpoint_what_it_needs(ray_docs: dict[str, Doc]) -> None:
    source = ray_docs["ConfigMap"]["data"]["driver.py"]
    compile(source, "driver.py", "exec")
    assert "from rollpoint.ray import RollpointCluster" in source
    constants, call = driver_call(source)
    kwargs = {k.arg: k.value for k in call.keywords}
    assert set(kwargs) <= set(inspect.signature(RollpointCluster).parameters), kwargs
    store = literal(kwargs["checkpoint_store"], constants)
    options = literal(kwargs["checkpoint_store_options"], constants)
    workdir = literal(kwargs["workdir"], constants)
    assert store.startswith("s3://")
    for name, template in ray_templates(ray_docs["RayCluster"]):
        spec = template["spec"]
        (c,) = spec["containers"]
        # The owner a Ray actor starts needs root, mounts, cgroups and namespaces.
        assert c["securityContext"] == {"privileged": True, "runAsUser": 0}, name
        assert mount_of(c, spec, "/sys/fs/cgroup") == {
            "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}
        }, name
        assert mount_of(c, spec, workdir) == {"emptyDir": {}}, name
        store_volume = mount_of(c, spec, str(Path(options).parent))
        assert store_volume == {"secret": {"secretName": STORE_SECRET, "defaultMode": 0o400}}, name
        assert Path(options).name == "options"
        env = {e["name"]: e["value"] for e in c["env"]}
        assert env["ROLLPOINT_SUPERVISOR"].endswith("/rollpoint-supervisor"), name
        assert mount_of(c, spec, "/dev/shm") == {"emptyDir": {"medium": "Memory"}}, name
        assert spec["terminationGracePeriodSeconds"] >= 120, name
    # The driver is mounted on the head, where the comment's command runs it.
    head = ray_docs["RayCluster"]["spec"]["headGroupSpec"]["template"]["spec"]
    driver_dir = [
        m["mountPath"] for m in head["containers"][0]["volumeMounts"] if m["name"] == "driver"
    ]
    assert mount_of(head["containers"][0], head, driver_dir[0]) == {
        "configMap": {"name": ray_docs["ConfigMap"]["metadata"]["name"]}
    }
    assert f"python {driver_dir[0]}/driver.py" in RAYCLUSTER.read_text()


# SkyPilot.


@pytest.fixture(scope="module")
def sky_task(tmp_path_factory: pytest.TempPathFactory) -> Doc:
    python = SKYPILOT_VENV / "bin" / "python"
    if not python.is_file():
        pytest.fail(
            f"no SkyPilot venv at {SKYPILOT_VENV}: scripts/install-deps makes it "
            "(or set ROLLPOINT_SKYPILOT_VENV)",
            pytrace=False,
        )
    home = tmp_path_factory.mktemp("sky-home")
    done = subprocess.run(
        [str(python), "-c", SKYPILOT_PROBE, str(SKYPILOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # A home of its own (SkyPilot writes ~/.sky), and no usage reports.
        env={
            "HOME": str(home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        },
    )
    if done.returncode != 0:
        pytest.fail(f"SkyPilot could not load {SKYPILOT}:\n{done.stderr[-4000:]}", pytrace=False)
    task: Doc = json.loads(done.stdout)
    return task


def rollpoint_command(script: str) -> list[str]:
    """The `rollpoint run ...` words of a shell script (continued lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = [line for line in joined.splitlines() if re.search(r"\brollpoint run\b", line)]
    assert len(lines) == 1, lines
    words = shlex.split(lines[0])
    start = words.index("rollpoint")
    assert words[start + 1] == "run"
    return words[start:]


def heredoc(script: str, path: str, env: dict[str, str]) -> str:
    """What `cat > PATH <<EOF ... EOF` writes, with the task's variables expanded."""
    found = re.search(rf"cat > {re.escape(path)} <<EOF\n(.*?)\nEOF\n", script, re.S)
    assert found is not None, script
    return re.sub(r"\$([A-Z_][A-Z0-9_]*)", lambda m: env[m.group(1)], found.group(1))


def test_skypilot_job_resumes_from_the_store_on_spot(sky_task: Doc) -> None:
    assert sky_task["name"] == "rollpoint-run-1"
    (resources,) = sky_task["resources"]
    assert resources["use_spot"] is True
    recovery = resources["job_recovery"]
    assert recovery["strategy"] in ("EAGER_NEXT_REGION", "FAILOVER")
    assert recovery["max_restarts_on_errors"] >= 1
    # rollpoint run exits EXIT_STOPPED after a stop checkpoint: that is recovered too.
    stopped = re.search(
        r"pub const EXIT_STOPPED: i32 = (\d+);", (ROOT / "crates/run/src/lib.rs").read_text()
    )
    assert stopped is not None
    assert recovery["recover_on_exit_codes"] == [int(stopped.group(1))]

    # The bucket, mounted.
    assert sky_task["file_mounts"] in (None, {})
    mounts = sky_task["storage_mounts"]
    assert mounts == {
        "/ckpt": {"source": "s3://my-bucket/rollpoint", "mode": "MOUNT", "persistent": True}
    }

    # The command, the same on every (re)launch.
    words = rollpoint_command(sky_task["run"])
    assert words[2].startswith("/ckpt/")
    assert words[3:] == [
        "--config",
        "run.toml",
        "--run-dir",
        "/tmp/rp",
        "--or-resume",
        "--grace-s",
        "90",
    ]
    unknown = {w.partition("=")[0] for w in words if w.startswith("--")} - accepted("run")
    assert not unknown, unknown
    # The config names the store in the bucket, so a new VM resumes from it.
    env = sky_task["envs"]
    config = tomllib.loads(heredoc(sky_task["run"], "run.toml", env))
    assert config["v"] == 1
    assert config["checkpoint_store"] == env["CHECKPOINT_STORE"] == "s3://my-bucket/rollpoint/run-1"
    assert config["checkpoint_store"].startswith(mounts["/ckpt"]["source"] + "/")
    assert config["checkpoint_every_s"] > 0
    # The model key is a secret given at launch, passed through sudo to the gateway.
    assert sky_task["secret_refs"] == [config["model_credential_env"]]
    assert sky_task["secrets_given"] == [config["model_credential_env"]]
    assert f"--preserve-env={config['model_credential_env']}," in sky_task["run"]
    # The binaries come from the mounted bucket, and every new VM installs them.
    for binary in ("rollpoint", "rollpoint-supervisor", "rollpoint-worker"):
        assert f"/ckpt/bin/{binary} " in sky_task["setup"], binary
    assert "ROLLPOINT_SUPERVISOR=/usr/local/lib/rollpoint/rollpoint-supervisor" in sky_task["run"]
