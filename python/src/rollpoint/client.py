"""Clients of the rollpoint services: ``Client`` (blocking) and ``AsyncClient``.

One client talks to one base URL, whichever service is there: the agent of
``rollpoint serve agent`` (rollouts), the coordinator of ``rollpoint serve
coordinator`` (checkpoints, restores, forks), or the control endpoint of
``rollpoint run --listen`` (the run's status, checkpoints, forks). Both
clients build the same requests and read the same replies from one table
of operations below; they differ only in how the bytes travel.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar
from urllib.parse import quote

from ._http import AsyncTransport, Endpoint, Response, SyncTransport
from ._parse import Obj, read
from .errors import ProtocolError, RollpointError, UnsupportedVersion, api_error
from .trajectory import Trajectory
from .wire import (
    IN_FLIGHT_CALLS,
    CheckpointReply,
    CoordinatorStatus,
    FleetReport,
    ForkReply,
    Move,
    RestoreReply,
    RolloutRef,
    RolloutResult,
    RolloutStatus,
    RunStatus,
    rollout_answer,
    rollout_list,
)

T = TypeVar("T")

# The agent's longest long poll, and the default slice a wait is cut into
# (short enough that a vanished server is noticed within a minute or so).
MAX_WAIT_MS = 600_000
DEFAULT_POLL_MS = 60_000
# What a reply may take on top of the wait or hold it asked for.
DEFAULT_TIMEOUT_S = 600.0
# `rollpoint run --listen` writes its address here.
CONTROL_FILE = "control.json"


class ResultTimeout(RollpointError, TimeoutError):
    """A rollout did not finish within the time the caller gave it."""

    def __init__(self, rollout: str, waited_s: float, last: RolloutStatus | None = None) -> None:
        state = f" (last {last.state})" if last is not None else ""
        super().__init__(f"rollout {rollout} had no result after {waited_s:.1f} s{state}")
        self.rollout = rollout
        self.waited_s = waited_s
        # The rollout's last status, when one was read.
        self.last = last


@dataclass(frozen=True)
class _Op(Generic[T]):
    """One request and how to read its reply."""

    method: str
    target: str
    ok: frozenset[int]
    parse: Callable[[int, object], T]
    body: bytes | None = None
    # Extra time on top of the client's timeout (a long poll, a hold).
    extra_s: float = 0.0


def _seg(rollout: str) -> str:
    return quote(rollout, safe="")


def _body(fields: Mapping[str, Any]) -> bytes:
    return json.dumps({"v": 1, **fields}, separators=(",", ":")).encode()


def _top(path: str, reader: Callable[[Obj], T]) -> Callable[[int, object], T]:
    return lambda _status, value: read(value, path, reader)


def _ref(_status: int, value: object) -> RolloutRef:
    s = read(value, "reply", RolloutStatus.parse)
    return RolloutRef(id=s.rollout, attempt=s.attempt, state=s.state, extra=s.extra)


def _answer(status: int, value: object) -> RolloutResult | RolloutStatus:
    if status == 202:
        return read(value, "reply", RolloutStatus.parse)
    return rollout_answer(value, "reply")


def _task_bytes(task: Mapping[str, Any] | str | bytes) -> bytes:
    if isinstance(task, bytes):
        return task
    if isinstance(task, str):
        return task.encode()
    return json.dumps(task, separators=(",", ":")).encode()


def _keys(scope: Iterable[str] | None) -> dict[str, Any]:
    if scope is None:
        return {}
    if isinstance(scope, str):
        raise TypeError("scope is a list of attempt keys, not one string")
    return {"scope": list(scope)}


class _Ops:
    """The requests of every route this package calls."""

    @staticmethod
    def submit(task: Mapping[str, Any] | str | bytes) -> _Op[RolloutRef]:
        return _Op("POST", "/v1/rollouts", frozenset({202}), _ref, _task_bytes(task))

    @staticmethod
    def list() -> _Op[tuple[RolloutStatus, ...]]:
        return _Op("GET", "/v1/rollouts", frozenset({200}), _top("reply", rollout_list))

    @staticmethod
    def get(rollout: str) -> _Op[RolloutResult | RolloutStatus]:
        return _Op("GET", f"/v1/rollouts/{_seg(rollout)}", frozenset({200}), _answer)

    @staticmethod
    def wait(rollout: str, wait_ms: int) -> _Op[RolloutResult | RolloutStatus]:
        return _Op(
            "GET",
            f"/v1/rollouts/{_seg(rollout)}/result?wait_ms={wait_ms}",
            frozenset({200, 202}),
            _answer,
            extra_s=wait_ms / 1000,
        )

    @staticmethod
    def cancel(rollout: str) -> _Op[RolloutResult]:
        return _Op(
            "DELETE",
            f"/v1/rollouts/{_seg(rollout)}",
            frozenset({200}),
            _top("reply", RolloutResult.parse),
        )

    @staticmethod
    def trajectory(rollout: str) -> _Op[Trajectory]:
        return _Op(
            "GET",
            f"/v1/rollouts/{_seg(rollout)}/trajectory",
            frozenset({200}),
            _top("trajectory", Trajectory.parse),
        )

    @staticmethod
    def checkpoint(
        scope: Iterable[str] | None, id: str | None, stop: bool, hold_ms: int
    ) -> _Op[CheckpointReply]:
        fields: dict[str, Any] = _keys(scope)
        if id is not None:
            fields["id"] = id
        if stop:
            fields["stop"] = True
        if hold_ms:
            fields["hold_ms"] = hold_ms
        return _Op(
            "POST",
            "/v1/coordinator/checkpoint",
            frozenset({200}),
            _top("reply", CheckpointReply.parse),
            _body(fields),
            extra_s=hold_ms / 1000,
        )

    @staticmethod
    def restore(
        id: str | None, scope: Iterable[str] | None, moves: Iterable[Move] = ()
    ) -> _Op[RestoreReply]:
        fields: dict[str, Any] = _keys(scope)
        if id is not None:
            fields["id"] = id
        moved = [m.body() for m in moves]
        if moved:
            fields["moves"] = moved
        return _Op(
            "POST",
            "/v1/coordinator/restore",
            frozenset({200}),
            _top("reply", RestoreReply.parse),
            _body(fields),
        )

    @staticmethod
    def fork(checkpoint: str, rollout: str, n: int) -> _Op[ForkReply]:
        return _Op(
            "POST",
            "/v1/coordinator/fork",
            frozenset({200}),
            _top("reply", ForkReply.parse),
            _body({"checkpoint": checkpoint, "rollout": rollout, "n": n}),
        )

    @staticmethod
    def status() -> _Op[CoordinatorStatus]:
        return _Op(
            "GET",
            "/v1/coordinator/status",
            frozenset({200}),
            _top("reply", CoordinatorStatus.parse),
        )

    @staticmethod
    def run_status() -> _Op[RunStatus]:
        return _Op("GET", "/v1/run/status", frozenset({200}), _top("reply", RunStatus.parse))

    @staticmethod
    def fleet_pause(calls: str | None) -> _Op[FleetReport]:
        fields: dict[str, Any] = {}
        if calls is not None:
            if calls not in IN_FLIGHT_CALLS:
                raise ValueError(f"calls: {calls!r} is not one of {IN_FLIGHT_CALLS}")
            fields["calls"] = calls
        return _Op(
            "POST",
            "/v1/fleet/pause",
            frozenset({200}),
            _top("reply", FleetReport.parse),
            _body(fields),
        )

    @staticmethod
    def fleet_continue(version: str | None) -> _Op[FleetReport]:
        fields: dict[str, Any] = {}
        if version is not None:
            fields["version"] = version
        return _Op(
            "POST",
            "/v1/fleet/continue",
            frozenset({200}),
            _top("reply", FleetReport.parse),
            _body(fields),
        )


def _read_token(token: str | None, token_file: str | os.PathLike[str] | None) -> str | None:
    if token is not None and token_file is not None:
        raise ValueError("give token or token_file, not both")
    if token_file is not None:
        token = Path(token_file).read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"the token file {os.fspath(token_file)} is empty")
    return token


def control_url(run_dir: str | os.PathLike[str]) -> str:
    """The base URL of a run's control endpoint, from ``RUN_DIR/control.json``."""
    path = Path(run_dir) / CONTROL_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RollpointError(
            f"{path} is missing: the run is not running, or was started without --listen"
        ) from None
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ProtocolError(f"{path}: not JSON: {e}") from None
    o = Obj(doc, "control.json")
    try:
        o.version("run control file")
    except UnsupportedVersion as e:
        raise UnsupportedVersion(f"{path}", e.version, e.supported) from None
    addr = o.string("addr")
    return f"http://{addr}"


class _Base:
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        token_file: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._endpoint = Endpoint.parse(self.base_url)
        self._token = _read_token(token, token_file)
        self.timeout = timeout

    @classmethod
    def from_run_dir(
        cls,
        run_dir: str | os.PathLike[str],
        token: str | None = None,
        *,
        token_file: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> Self:
        """A client of a run's control endpoint: the address from ``RUN_DIR/control.json``,
        the token given here (the one ``--control-token-file`` holds)."""
        return cls(control_url(run_dir), token, token_file=token_file, timeout=timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def _headers(self, op: _Op[Any]) -> dict[str, str]:
        h: dict[str, str] = {}
        if self._token is not None:
            h["Authorization"] = f"Bearer {self._token}"
        if op.body is not None:
            h["Content-Type"] = "application/json"
        return h

    def _finish(self, op: _Op[T], resp: Response) -> T:
        if resp.status not in op.ok:
            raise api_error(resp.status, resp.body, method=op.method, path=op.target)
        try:
            value = json.loads(resp.body)
        except ValueError:
            raise ProtocolError(
                f"{op.method} {op.target}: {resp.status} reply is not JSON: {resp.body[:200]!r}"
            ) from None
        return op.parse(resp.status, value)


def _slice(deadline: float | None, poll_ms: int) -> int:
    if deadline is None:
        return poll_ms
    left = max(0.0, deadline - time.monotonic())
    return min(poll_ms, int(left * 1000))


def _poll_ms(poll_ms: int) -> int:
    if not 0 < poll_ms <= MAX_WAIT_MS:
        raise ValueError(f"poll_ms {poll_ms} is outside 1..={MAX_WAIT_MS}")
    return poll_ms


class Client(_Base):
    """A blocking client; safe to share between threads (one connection per request)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        token_file: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(base_url, token, token_file=token_file, timeout=timeout)
        self._transport = SyncTransport(self._endpoint, ssl_context)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is kept open between requests; here for symmetry with AsyncClient."""

    def _run(self, op: _Op[T]) -> T:
        resp = self._transport.request(
            op.method, op.target, self._headers(op), op.body, self.timeout + op.extra_s
        )
        return self._finish(op, resp)

    # The agent (`rollpoint serve agent`).

    def submit(self, task: Mapping[str, Any] | str | bytes) -> RolloutRef:
        """Starts a rollout task (RolloutTask v1, a dict or its JSON) as attempt 0."""
        return self._run(_Ops.submit(task))

    def rollouts(self) -> tuple[RolloutStatus, ...]:
        """Every rollout the agent knows and where it stands."""
        return self._run(_Ops.list())

    def list(self) -> tuple[RolloutStatus, ...]:
        """The same as ``rollouts()``."""
        return self.rollouts()

    def get(self, rollout: str) -> RolloutResult | RolloutStatus:
        """The result once the rollout is done, its status before."""
        return self._run(_Ops.get(rollout))

    def result(
        self, rollout: str, timeout: float | None = None, *, poll_ms: int = DEFAULT_POLL_MS
    ) -> RolloutResult:
        """Waits for the rollout's result (for ever when ``timeout`` is None).

        Raises ResultTimeout past ``timeout`` seconds, Lost when its run died.
        """
        poll_ms = _poll_ms(poll_ms)
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        while True:
            got = self._run(_Ops.wait(rollout, _slice(deadline, poll_ms)))
            if isinstance(got, RolloutResult):
                return got
            if deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(rollout, time.monotonic() - start, got)

    def cancel(self, rollout: str) -> RolloutResult:
        """Cancels a rollout in flight and returns its result (status ``cancelled``)."""
        return self._run(_Ops.cancel(rollout))

    def trajectory(self, rollout: str) -> Trajectory:
        """The finished rollout's trajectory document."""
        return self._run(_Ops.trajectory(rollout))

    # The coordinator (`rollpoint serve coordinator`, or a run's control endpoint).

    def checkpoint(
        self,
        scope: Iterable[str] | None = None,
        *,
        id: str | None = None,
        stop: bool = False,
        hold_ms: int = 0,
    ) -> CheckpointReply:
        """Takes a checkpoint of every rollout in flight, or of the attempt keys in ``scope``
        (a run's endpoint refuses ``scope``), answered once it is published."""
        return self._run(_Ops.checkpoint(scope, id, stop, hold_ms))

    def restore(
        self,
        id: str | None = None,
        scope: Iterable[str] | None = None,
        moves: Iterable[Move] = (),
    ) -> RestoreReply:
        """Restores checkpoint ``id`` (the latest when None) as the next attempts.

        With ``moves``, the rollouts of lost participants continue on live ones from the
        checkpoint store (``scope`` then defaults to what the moved agents held).
        """
        return self._run(_Ops.restore(id, scope, moves))

    def fork(self, checkpoint: str, rollout: str, n: int = 1) -> ForkReply:
        """Makes ``n`` new rollouts ``rollout~i`` from what ``checkpoint`` saved of it."""
        return self._run(_Ops.fork(checkpoint, rollout, n))

    def status(self) -> CoordinatorStatus:
        """The coordinator's latest checkpoint and each participant's phase."""
        return self._run(_Ops.status())

    # The run (`rollpoint run --listen`).

    def run_status(self) -> RunStatus:
        """Where the run stands."""
        return self._run(_Ops.run_status())

    def pause_for_update(self, calls: str | None = None) -> FleetReport:
        """Pauses the fleet for a weight update: every rollout in flight is paused in place
        and no model call is sent until :meth:`continue_after_update`. Calls generating now
        ``"finish"`` under the old version or ``"abort"`` and are asked again after (default:
        the run's ``fleet_calls``)."""
        return self._run(_Ops.fleet_pause(calls))

    def continue_after_update(self, version: str | None = None) -> FleetReport:
        """Continues the fleet; model calls from now on are tagged with ``version``."""
        return self._run(_Ops.fleet_continue(version))


class AsyncClient(_Base):
    """An asyncio client: any number of requests at once, over kept connections.

    Use ``async with AsyncClient(...) as c`` or call ``await c.close()``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        token_file: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 64,
    ) -> None:
        super().__init__(base_url, token, token_file=token_file, timeout=timeout)
        self._transport = AsyncTransport(self._endpoint, ssl_context=ssl_context, max_idle=max_idle)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._transport.close()

    async def _run(self, op: _Op[T]) -> T:
        resp = await self._transport.request(
            op.method, op.target, self._headers(op), op.body, self.timeout + op.extra_s
        )
        return self._finish(op, resp)

    async def submit(self, task: Mapping[str, Any] | str | bytes) -> RolloutRef:
        """Starts a rollout task (RolloutTask v1, a dict or its JSON) as attempt 0."""
        return await self._run(_Ops.submit(task))

    async def rollouts(self) -> tuple[RolloutStatus, ...]:
        """Every rollout the agent knows and where it stands."""
        return await self._run(_Ops.list())

    async def list(self) -> tuple[RolloutStatus, ...]:
        """The same as ``rollouts()``."""
        return await self.rollouts()

    async def get(self, rollout: str) -> RolloutResult | RolloutStatus:
        """The result once the rollout is done, its status before."""
        return await self._run(_Ops.get(rollout))

    async def result(
        self, rollout: str, timeout: float | None = None, *, poll_ms: int = DEFAULT_POLL_MS
    ) -> RolloutResult:
        """Waits for the rollout's result (for ever when ``timeout`` is None).

        Raises ResultTimeout past ``timeout`` seconds, Lost when its run died.
        """
        poll_ms = _poll_ms(poll_ms)
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        while True:
            got = await self._run(_Ops.wait(rollout, _slice(deadline, poll_ms)))
            if isinstance(got, RolloutResult):
                return got
            if deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(rollout, time.monotonic() - start, got)

    async def cancel(self, rollout: str) -> RolloutResult:
        """Cancels a rollout in flight and returns its result (status ``cancelled``)."""
        return await self._run(_Ops.cancel(rollout))

    async def trajectory(self, rollout: str) -> Trajectory:
        """The finished rollout's trajectory document."""
        return await self._run(_Ops.trajectory(rollout))

    async def checkpoint(
        self,
        scope: Iterable[str] | None = None,
        *,
        id: str | None = None,
        stop: bool = False,
        hold_ms: int = 0,
    ) -> CheckpointReply:
        """Takes a checkpoint of every rollout in flight, or of the attempt keys in ``scope``
        (a run's endpoint refuses ``scope``), answered once it is published."""
        return await self._run(_Ops.checkpoint(scope, id, stop, hold_ms))

    async def restore(
        self,
        id: str | None = None,
        scope: Iterable[str] | None = None,
        moves: Iterable[Move] = (),
    ) -> RestoreReply:
        """Restores checkpoint ``id`` (the latest when None) as the next attempts.

        With ``moves``, the rollouts of lost participants continue on live ones.
        """
        return await self._run(_Ops.restore(id, scope, moves))

    async def fork(self, checkpoint: str, rollout: str, n: int = 1) -> ForkReply:
        """Makes ``n`` new rollouts ``rollout~i`` from what ``checkpoint`` saved of it."""
        return await self._run(_Ops.fork(checkpoint, rollout, n))

    async def status(self) -> CoordinatorStatus:
        """The coordinator's latest checkpoint and each participant's phase."""
        return await self._run(_Ops.status())

    async def run_status(self) -> RunStatus:
        """Where the run stands."""
        return await self._run(_Ops.run_status())

    async def pause_for_update(self, calls: str | None = None) -> FleetReport:
        """Pauses the fleet for a weight update (see :meth:`Client.pause_for_update`)."""
        return await self._run(_Ops.fleet_pause(calls))

    async def continue_after_update(self, version: str | None = None) -> FleetReport:
        """Continues the fleet; model calls from now on are tagged with ``version``."""
        return await self._run(_Ops.fleet_continue(version))
