"""Reading replies: versions, extras, error bodies and ``control.json``.

The reply bodies come from the OpenAPI description the services are
checked against (docs/openapi.json): each schema's required fields are
filled with values of their type, so a reader that drifts from the
description fails here before it meets a server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rollpoint
from rollpoint import (
    ApiError,
    BadRequest,
    Busy,
    Client,
    Conflict,
    Failed,
    Lost,
    NotFound,
    NotPrepared,
    ProtocolError,
    RollpointError,
    TooLarge,
    Unauthorized,
    Unprocessable,
    UnsupportedVersion,
)
from rollpoint._parse import read
from rollpoint.errors import api_error

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def schemas() -> dict[str, Any]:
    doc = json.loads(OPENAPI.read_text())
    found: dict[str, Any] = doc["components"]["schemas"]
    return found


def example(name: str, depth: int = 0) -> Any:
    """A value of schema ``name`` with every property set (the required ones and the rest)."""
    return _value(schemas()[name], depth)


def _value(s: dict[str, Any], depth: int) -> Any:
    if "$ref" in s:
        return example(s["$ref"].rsplit("/", 1)[1], depth + 1)
    if "oneOf" in s:
        options = [o for o in s["oneOf"] if o.get("type") != "null"]
        return _value(options[0], depth)
    if "enum" in s:
        return s["enum"][0]
    kind = s.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    if kind == "object":
        props = s.get("properties", {})
        out = {k: _value(v, depth) for k, v in props.items()}
        if "v" in props:
            out["v"] = 1
        return out
    if kind == "array":
        return [_value(s["items"], depth)] if depth < 4 else []
    if kind == "string":
        return "x-1"
    if kind == "integer":
        return 3
    if kind == "number":
        return 0.5
    if kind == "boolean":
        return True
    raise AssertionError(f"no example for {s}")


# The version a reader is at, where it is not 1.
CURRENT = {"RolloutResult": 2}

READERS: list[tuple[str, Any]] = [
    ("RolloutStatus", rollpoint.RolloutStatus.parse),
    ("RolloutResult", rollpoint.RolloutResult.parse),
    ("CheckpointReply", rollpoint.CheckpointReply.parse),
    ("CoordinatorRestoreReply", rollpoint.RestoreReply.parse),
    ("ForkReply", rollpoint.ForkReply.parse),
    ("CoordinatorStatus", rollpoint.CoordinatorStatus.parse),
    ("RunStatusReport", rollpoint.RunStatus.parse),
    ("FleetReport", rollpoint.FleetReport.parse),
]


@pytest.mark.parametrize(("schema", "reader"), READERS)
def test_every_described_field_is_read_and_nothing_is_left_over(schema: str, reader: Any) -> None:
    value = example(schema)
    value["v"] = CURRENT.get(schema, 1)
    parsed = read(value, "reply", reader)
    assert parsed.v == CURRENT.get(schema, 1)
    assert parsed.extra == {}, f"{schema}: fields the reader does not know: {parsed.extra}"


@pytest.mark.parametrize(("schema", "reader"), READERS)
def test_new_fields_are_kept_and_new_versions_refused(schema: str, reader: Any) -> None:
    value = example(schema)
    value["added_later"] = {"n": 1}
    assert read(value, "reply", reader).extra == {"added_later": {"n": 1}}
    newer = CURRENT.get(schema, 1) + 1
    value["v"] = newer
    with pytest.raises(UnsupportedVersion) as e:
        read(value, "reply", reader)
    assert e.value.version == newer


def test_a_result_reads_its_nested_parts() -> None:
    value = example("RolloutResult")
    value["verdict"]["novel"] = 1
    r = rollpoint.RolloutResult.from_dict(value)
    assert r.verdict is not None
    assert r.verdict.extra == {"novel": 1}
    assert r.passed is True
    assert r.launches[0].launch_id == "x-1"
    assert r.usage is not None
    assert r.usage.total_tokens == 3
    assert r.key == "x-1-a3"
    value["attempt"] = "3"
    with pytest.raises(ProtocolError, match=r"rollout result\.attempt"):
        rollpoint.RolloutResult.from_dict(value)


def test_infrastructure_errors_are_no_rewards_in_either_version() -> None:
    value = example("RolloutResult")
    value.update(
        v=2,
        status="infra_error",
        infra_class="sandbox_lost",
        infra_retries=["model_unreachable"],
        group="task-1",
        reward=None,
        verdict=None,
    )
    r = rollpoint.RolloutResult.from_dict(value)
    assert r.infra_error
    assert r.reward is None
    assert (r.infra_class, r.infra_retries, r.group) == (
        "sandbox_lost",
        ("model_unreachable",),
        "task-1",
    )
    assert r.infra_class in rollpoint.wire.INFRA_CLASSES
    # Version 1 said `failed` and gave no class.
    old = example("RolloutResult")
    old.update(v=1, status="failed", reward=None, verdict=None)
    for k in ("infra_class", "infra_retries", "group"):
        old.pop(k, None)
    r = rollpoint.RolloutResult.from_dict(old)
    assert (r.status, r.infra_class, r.infra_error) == ("infra_error", "unclassified", True)


def test_a_result_says_what_its_sandbox_used_and_the_limits_hit() -> None:
    value = example("RolloutResult")
    value["resources"] = {
        "cpu_ms": 1500,
        "memory_peak_bytes": 67108864,
        "disk_bytes": 4096,
        "net_bytes_in": 10,
        "net_bytes_out": 20,
        "net_connections": 1,
        "limits_hit": ["pids: 3 forks refused by its limit of 64 processes (pids.max)"],
    }
    r = rollpoint.RolloutResult.from_dict(value)
    assert r.resources is not None
    assert r.resources.cpu_ms == 1500
    assert r.resources.memory_peak_bytes == 67108864
    assert r.resources.limits_hit[0].startswith("pids: ")
    value["resources"]["cpu_ms"] = "many"
    with pytest.raises(ProtocolError, match=r"resources\.cpu_ms"):
        rollpoint.RolloutResult.from_dict(value)


def test_the_answer_of_get_is_a_result_or_a_status() -> None:
    from rollpoint.wire import rollout_answer

    assert isinstance(rollout_answer(example("RolloutResult"), "r"), rollpoint.RolloutResult)
    assert isinstance(rollout_answer(example("RolloutStatus"), "r"), rollpoint.RolloutStatus)


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "bad_request", BadRequest),
        (401, "unauthorized", Unauthorized),
        (404, "not_found", NotFound),
        (409, "conflict", Conflict),
        (409, "busy", Busy),
        (409, "not_prepared", NotPrepared),
        (413, "too_large", TooLarge),
        (422, "unprocessable", Unprocessable),
        (500, "lost", Lost),
        (502, "failed", Failed),
        (418, "teapot", ApiError),
    ],
)
def test_error_bodies_become_their_class(status: int, code: str, cls: type[ApiError]) -> None:
    described = schemas()["ErrorCode"]["enum"]
    assert code in described or cls is ApiError
    body = json.dumps({"error": {"code": code, "message": "why", "field": "a.b"}}).encode()
    e = api_error(status, body, method="POST", path="/v1/x")
    assert type(e) is cls
    assert (e.status, e.code, e.message, e.field) == (status, code, "why", "a.b")
    assert "POST /v1/x" in str(e)
    assert isinstance(e, RollpointError)


def test_an_error_reply_without_the_error_shape_still_types_by_status() -> None:
    e = api_error(404, b"")
    assert isinstance(e, NotFound)
    assert e.field is None
    e = api_error(503, b"<html>down</html>")
    assert type(e) is ApiError
    assert e.code == "http_503"
    assert "down" in e.message


def test_control_json_gives_the_address_and_its_version_is_checked(tmp_path: Path) -> None:
    with pytest.raises(RollpointError, match="--listen"):
        Client.from_run_dir(tmp_path, token="t")
    (tmp_path / "control.json").write_text(json.dumps({"v": 1, "addr": "127.0.0.1:4567"}))
    assert Client.from_run_dir(tmp_path, token="t").base_url == "http://127.0.0.1:4567"
    (tmp_path / "control.json").write_text(json.dumps({"v": 9, "addr": "127.0.0.1:4567"}))
    with pytest.raises(UnsupportedVersion, match=r"control\.json"):
        rollpoint.AsyncClient.from_run_dir(tmp_path, token="t")


def test_a_token_comes_from_its_file(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("  secret\n")
    c = Client("http://127.0.0.1:1/", token_file=f)
    assert c.base_url == "http://127.0.0.1:1"
    f.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        Client("http://127.0.0.1:1", token_file=f)
    with pytest.raises(ValueError, match="not both"):
        Client("http://127.0.0.1:1", token="a", token_file=f)
    with pytest.raises(ValueError, match="scheme"):
        Client("ftp://127.0.0.1:1")
