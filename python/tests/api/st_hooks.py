"""Schemathesis hooks of scripts/api-check, loaded with ``SCHEMATHESIS_HOOKS=st_hooks``.

One hook, ``before_call``, edits a generated request just before it is sent; schemathesis
then judges the edited request against docs/openapi.json again (a request an edit makes valid
is expected to be accepted), so no edit hides a disagreement between the document and a
server. The edits, and why:

- JSON Schema's ``integer`` admits ``231.0`` and no keyword can exclude it, while the servers
  read integer fields from JSON integers only (serde): whole floats are sent as integers.
- A checkpoint's ``hold_ms`` (up to 300 000) keeps every participant paused that long, and
  ``wait_ms`` (up to 600 000) waits that long for a running rollout's result: both are cut to
  under 50 ms so the check stays bounded.
- The gateway's stalls query waits up to 25 s for a change: one without ``wait_ms`` gets 0.
- A participant call's ``timeout_ms`` as short as 1 ms can only end in the documented 504
  (``deadline_exceeded``): those under 2 s are raised to 2 s so the call is judged on what it
  does, not on the clock.
- ``rollpoint run --listen`` serves the coordinator's checkpoint route, described once for
  both, with two differences that description cannot carry: the run takes no ``scope``, and
  ``stop`` ends the run (the service under test). Neither is sent to the run.
- Rules across fields that the document states in prose only are kept: a checkpoint that
  stops holds nothing; a participant restore with ``fork`` has ``scope`` exactly
  ``[fork.from]`` and branches named ``<from's rollout>~<n>``, each once, at an attempt no
  earlier than ``fork.from``'s; a sandbox with swap has a memory limit, and one that drops
  capabilities is strict; a rollout task without ``id`` has a task id that is a rollout id.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import schemathesis

TARGET = os.environ.get("API_CHECK_TARGET", "")
MAX_HOLD_MS = 300_000
MAX_WAIT_MS = 600_000
HOLD_MS = 50
MIN_CALL_MS = 2_000
MAX_ROLLOUT_ID = 112


def _whole(value: Any) -> Any:
    """``value`` with every float that is a whole number written as an integer."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**64:
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value


def _checkpoint(body: dict[str, Any]) -> None:
    if "hold_ms" in body:
        hold = body["hold_ms"] = _short(body["hold_ms"], MAX_HOLD_MS)
        if body.get("stop") is True and isinstance(hold, int) and 0 <= hold <= MAX_HOLD_MS:
            body["hold_ms"] = 0
    if TARGET == "run":
        body.pop("scope", None)
        if body.get("stop") is True:
            body["stop"] = False


_ATTEMPT = re.compile(r"^(.*?)(?:-a([1-9][0-9]*))?$")


def _split(key: str) -> tuple[str, int]:
    m = _ATTEMPT.match(key)
    assert m is not None
    return m.group(1), int(m.group(2) or 0)


def _key(rollout: str, attempt: int) -> str:
    return rollout if attempt == 0 else f"{rollout}-a{attempt}"


def _participant_restore(body: dict[str, Any]) -> None:
    fork = body.get("fork")
    if not isinstance(fork, dict):
        return
    source, to = fork.get("from"), fork.get("to")
    if not (isinstance(source, str) and isinstance(to, list) and to):
        return
    rollout, attempt = _split(source)
    if len(f"{rollout}~{len(to)}") > MAX_ROLLOUT_ID:
        # No branch name fits: a restore without a fork.
        del body["fork"]
        return
    branches = []
    for i, key in enumerate(to, start=1):
        if not isinstance(key, str):
            return
        branches.append(_key(f"{rollout}~{i}", max(attempt, _split(key)[1])))
    fork["to"] = branches
    body["scope"] = [source]


def _short(value: Any, limit: int) -> Any:
    """A wait of 0..=limit ms cut to under HOLD_MS; anything else (a negative case) as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= limit:
        return value % HOLD_MS
    if isinstance(value, str) and value.isdigit() and 0 < int(value) <= limit:
        return str(int(value) % HOLD_MS)
    return value


def _sandbox(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    limits = spec.get("limits")
    if isinstance(limits, dict):
        swap = limits.get("swap_bytes")
        if isinstance(swap, int) and swap > 0 and limits.get("memory_bytes") is None:
            limits["memory_bytes"] = 1 << 30
    strict_only = spec.get("drop_capabilities") or spec.get("no_new_privs") is True
    if strict_only and spec.get("isolation") == "trusted":
        spec["isolation"] = "strict"


def _task(task: Any) -> None:
    if isinstance(task, dict):
        _sandbox(task.get("sandbox"))


def _rollout_task(body: dict[str, Any]) -> None:
    task = body.get("task")
    _task(task)
    if body.get("id") is not None or not isinstance(task, dict):
        return
    tid = task.get("id")
    # Task ids may start with `~` or end in `-a<digits>`; rollout ids may not.
    if isinstance(tid, str) and (tid.startswith("~") or re.search(r"-a[0-9]+$", tid)):
        rid = f"r{tid}" if tid.startswith("~") else tid
        body["id"] = f"{rid}x" if re.search(r"-a[0-9]+$", rid) else rid


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    query = case.query
    if context.operation.path == "/v1/gateway/stalls" and isinstance(query, dict | None):
        # Its wait defaults to 25 s: a request without one waits none.
        query = case.query = {"wait_ms": 0, **(query or {})}
    if isinstance(query, dict) and "wait_ms" in query:
        waited = _short(query["wait_ms"], MAX_WAIT_MS)
        if waited != query["wait_ms"]:
            case.query = {**query, "wait_ms": waited}
    if not isinstance(case.body, dict | list):
        return
    before = json.dumps(case.body, sort_keys=True)
    body = _whole(case.body)
    if isinstance(body, dict):
        path = context.operation.path
        timeout = body.get("timeout_ms")
        short = isinstance(timeout, int) and timeout < MIN_CALL_MS
        if path.startswith("/v1/checkpoint/") and short:
            body["timeout_ms"] = MIN_CALL_MS
        if path == "/v1/coordinator/checkpoint":
            _checkpoint(body)
        elif path == "/v1/checkpoint/restore":
            _participant_restore(body)
        elif path == "/v1/owner/sessions":
            _task(body.get("task"))
        elif path == "/v1/owner/restore":
            _task(body.get("task"))
            _sandbox(body.get("spec"))
        elif path == "/v1/rollouts":
            _rollout_task(body)
    # `1 == 1.0` in Python: compare the JSON text.
    if json.dumps(body, sort_keys=True) != before:
        case.body = body
