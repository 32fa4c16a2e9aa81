"""The asyncio HTTP/1.1 client against a tiny real asyncio server in the test.

The server answers by path with bytes written out by hand, so each framing
the client must read (Content-Length, chunked with extensions and
trailers, a body up to the end of the connection, a 100 Continue first) and
each way a connection ends (kept, closed after the reply, closed while
idle, cut mid-body) is exercised on a real socket.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from rollpoint import AsyncClient, BadRequest, Client, Failed, ProtocolError, TransportError
from rollpoint._http import AsyncTransport, Endpoint
from rollpoint.client import _Op

Handler = Callable[["Request", asyncio.StreamWriter], Awaitable[bool]]


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    port: int
    requests: list[Request] = field(default_factory=list)
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.IncompleteReadError:
        return None
    method, target, _ = line.decode().split(" ", 2)
    headers = {}
    while (h := await reader.readuntil(b"\r\n")) != b"\r\n":
        k, _, v = h.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, target, headers, body)


def reply(status: str, body: bytes, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def handle(req: Request, w: asyncio.StreamWriter) -> bool:
    """Writes the reply for ``req``; returns whether to keep the connection."""
    doc = json.dumps({"path": req.target, "got": req.body.decode()}).encode()
    if req.target == "/length":
        w.write(reply("200 OK", doc, "Content-Type: application/json"))
    elif req.target == "/chunked":
        half = len(doc) // 2
        w.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{half:x};ext=1\r\n".encode()
            + doc[:half]
            + b"\r\n"
            + f"{len(doc) - half:X}\r\n".encode()
            + doc[half:]
            + b"\r\n0\r\nX-Trailer: yes\r\n\r\n"
        )
    elif req.target == "/continue":
        w.write(b"HTTP/1.1 100 Continue\r\n\r\n" + reply("200 OK", doc))
    elif req.target == "/eof":
        w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + doc)
        await w.drain()
        return False
    elif req.target == "/close-after":
        # Framed and not announced: the server drops the connection after it.
        w.write(reply("200 OK", doc))
        await w.drain()
        return False
    elif req.target == "/slow":
        await asyncio.sleep(0.5)
        w.write(reply("200 OK", doc))
    elif req.target == "/hang":
        await asyncio.sleep(30)
    elif req.target == "/cut":
        w.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial')
        await w.drain()
        return False
    elif req.target == "/garbage":
        w.write(b"SPDY/9 what\r\n\r\n")
        await w.drain()
        return False
    elif req.target == "/bad-chunk":
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        await w.drain()
        return False
    elif req.target == "/error":
        err = {"error": {"code": "bad_request", "message": "no", "field": "task.v"}}
        w.write(reply("400 Bad Request", json.dumps(err).encode()))
    elif req.target == "/proxy-page":
        w.write(reply("502 Bad Gateway", b"<html>upstream down</html>"))
    else:
        w.write(reply("404 Not Found", b""))
    await w.drain()
    return True


@asynccontextmanager
async def serving(handler: Handler = handle) -> AsyncIterator[Server]:
    server: Server | None = None

    async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        assert server is not None
        server.connections += 1
        try:
            while (req := await _read_request(r)) is not None:
                server.requests.append(req)
                if not await handler(req, w):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            w.close()

    srv = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    server = Server(srv.sockets[0].getsockname()[1])
    try:
        yield server
    finally:
        srv.close()
        await srv.wait_closed()


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def test_content_length_and_chunked_bodies_are_read_whole() -> None:
    async def main() -> None:
        async with serving() as s:
            t = AsyncTransport(Endpoint.parse(s.url))
            for path in ("/length", "/chunked", "/continue"):
                r = await t.request("POST", path, {}, b'{"x":1}', 10)
                assert r.status == 200, path
                assert json.loads(r.body) == {"path": path, "got": '{"x":1}'}, path
            # All three on one kept connection.
            assert s.connections == 1
            assert s.requests[0].headers["content-length"] == "7"
            assert s.requests[0].headers["host"] == f"127.0.0.1:{s.port}"
            await t.close()

    run(main())


def test_a_body_to_the_end_of_the_connection_is_read_and_not_reused() -> None:
    async def main() -> None:
        async with serving() as s:
            t = AsyncTransport(Endpoint.parse(s.url))
            r = await t.request("GET", "/eof", {}, None, 10)
            assert json.loads(r.body)["path"] == "/eof"
            r = await t.request("GET", "/length", {}, None, 10)
            assert r.status == 200
            assert s.connections == 2
            await t.close()

    run(main())


def test_a_kept_connection_the_server_closed_is_replaced() -> None:
    async def main() -> None:
        async with serving() as s:
            t = AsyncTransport(Endpoint.parse(s.url))
            await t.request("GET", "/close-after", {}, None, 10)
            # Let the close arrive, or not: either way the next request succeeds.
            await asyncio.sleep(0.05)
            r = await t.request("GET", "/length", {}, None, 10)
            assert json.loads(r.body)["path"] == "/length"
            assert s.connections == 2
            await t.close()

    run(main())


def test_a_cut_body_a_bad_status_line_and_a_bad_chunk_are_errors() -> None:
    async def main() -> None:
        async with serving() as s:
            t = AsyncTransport(Endpoint.parse(s.url))
            with pytest.raises(TransportError):
                await t.request("GET", "/cut", {}, None, 10)
            with pytest.raises(ProtocolError, match="status line"):
                await t.request("GET", "/garbage", {}, None, 10)
            with pytest.raises(ProtocolError, match="chunk size"):
                await t.request("GET", "/bad-chunk", {}, None, 10)
            await t.close()

    run(main())


def test_a_reply_past_the_timeout_is_a_transport_error() -> None:
    async def main() -> None:
        async with serving() as s:
            t = AsyncTransport(Endpoint.parse(s.url))
            start = time.monotonic()
            with pytest.raises(TransportError, match="timed out"):
                await t.request("GET", "/hang", {}, None, 0.3)
            assert time.monotonic() - start < 5
            await t.close()

    run(main())


def test_two_hundred_slow_requests_at_once_take_one_delay_and_no_thread() -> None:
    async def main() -> None:
        async with serving() as s:
            before = threading.active_count()
            async with AsyncClient(s.url) as c:
                t = c._transport
                start = time.monotonic()
                replies = await asyncio.gather(
                    *(t.request("GET", "/slow", {}, None, 30) for _ in range(200))
                )
                took = time.monotonic() - start
                assert threading.active_count() == before
            assert all(r.status == 200 for r in replies)
            assert s.connections == 200
            # Each waits 0.5 s on the server; together they still take about that.
            assert took < 5, took

    run(main())


def test_error_replies_are_typed_through_both_clients() -> None:
    async def main() -> None:
        async with serving() as s:
            async with AsyncClient(s.url, token="t") as c:
                with pytest.raises(BadRequest) as e:
                    await c._run(_get("/error"))
                err = e.value
                assert (err.status, err.code, err.field) == (400, "bad_request", "task.v")
                assert e.value.message == "no"
                with pytest.raises(Failed) as f:
                    await c._run(_get("/proxy-page"))
                assert f.value.code == "failed"
                assert "upstream down" in f.value.message
            assert s.requests[0].headers["authorization"] == "Bearer t"

            def blocking() -> None:
                with pytest.raises(BadRequest) as e:
                    Client(s.url)._run(_get("/error"))
                assert e.value.field == "task.v"
                got = Client(s.url)._run(_get("/chunked"))
                assert got == {"path": "/chunked", "got": ""}

            await asyncio.to_thread(blocking)

    run(main())


def _get(path: str) -> _Op[object]:
    """A GET whose reply is the decoded JSON as it is."""
    return _Op("GET", path, frozenset({200}), lambda _s, v: v)
