"""HTTP/1.1 for JSON requests, blocking and on asyncio.

The package may depend on nothing outside the standard library, and the
standard library has no asyncio HTTP client. A trainer awaits hundreds of
rollout results at once, each a long poll held open for up to minutes, so a
thread per request (``run_in_executor`` over ``http.client``) would mean
hundreds of threads; instead ``AsyncTransport`` speaks the small part of
HTTP/1.1 these services use directly over asyncio streams: one request per
connection at a time, bodies framed by ``Content-Length`` or chunked, and
idle connections kept for reuse. The blocking ``SyncTransport`` is
``http.client``, which already does all of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from .errors import ProtocolError, TransportError

USER_AGENT = "rollpoint-python/0.1"
# Longest status line, header line or chunk-size line accepted.
MAX_LINE = 64 * 1024
# All header lines of one response together.
MAX_HEAD = 256 * 1024
# Largest body accepted (a long trajectory is tens of MB).
MAX_BODY = 1 << 30


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    # Lowercase names; repeated headers joined with ", ".
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Endpoint:
    """Where a base URL points: scheme, host, port and path prefix."""

    scheme: str
    host: str
    port: int
    prefix: str

    @staticmethod
    def parse(base_url: str) -> Endpoint:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"base URL {base_url!r}: the scheme must be http or https")
        if not u.hostname:
            raise ValueError(f"base URL {base_url!r}: no host")
        if u.query or u.fragment:
            raise ValueError(f"base URL {base_url!r}: no query or fragment expected")
        try:
            port = u.port or (443 if u.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"base URL {base_url!r}: bad port") from None
        return Endpoint(u.scheme, u.hostname, port, u.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    def url(self, target: str) -> str:
        return f"{self.scheme}://{self.host_header}{self.prefix}{target}"


class SyncTransport:
    """Blocking requests, a fresh ``http.client`` connection each (safe across threads)."""

    def __init__(self, endpoint: Endpoint, ssl_context: ssl.SSLContext | None = None) -> None:
        self.endpoint = endpoint
        self._ssl = ssl_context

    def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float | None,
    ) -> Response:
        ep = self.endpoint
        conn: http.client.HTTPConnection
        if ep.scheme == "https":
            conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)
        url = ep.url(target)
        try:
            all_headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **headers}
            conn.request(method, ep.prefix + target, body=body, headers=all_headers)
            r = conn.getresponse()
            data = r.read(MAX_BODY + 1)
            if len(data) > MAX_BODY:
                raise ProtocolError(f"{url}: reply body over {MAX_BODY} bytes")
            found: dict[str, str] = {}
            for k, v in r.getheaders():
                k = k.lower()
                found[k] = f"{found[k]}, {v}" if k in found else v
            return Response(r.status, r.reason, found, data)
        except TimeoutError:
            raise TransportError(f"{method} timed out after {timeout} s", url=url) from None
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(f"{method} failed: {e!r}", url=url) from e
        finally:
            conn.close()


class _Stale(Exception):
    """A kept connection the server had closed before the request reached it."""


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class AsyncTransport:
    """Requests on asyncio over kept HTTP/1.1 connections, any number at once."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 64,
    ) -> None:
        self.endpoint = endpoint
        self._ssl: ssl.SSLContext | None = None
        if endpoint.scheme == "https":
            self._ssl = ssl_context or ssl.create_default_context()
        self._max_idle = max_idle
        self._idle: list[_Conn] = []
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float | None,
    ) -> Response:
        if self._closed:
            raise TransportError("the client is closed", url=self.endpoint.url(target))
        url = self.endpoint.url(target)
        head = self._head(method, target, headers, body)
        end = None if timeout is None else time.monotonic() + timeout
        # A kept connection can turn out closed by the server only once it is
        # used; then, and only when not a byte of the reply came, the request
        # goes once more on a new connection (it never reached the server).
        for retry in (False, True):
            conn, reused = (None, False) if retry else self._take()
            left = None if end is None else max(0.0, end - time.monotonic())
            try:
                async with asyncio.timeout(left):
                    if conn is None:
                        conn = await self._connect()
                    resp, keep = await self._exchange(conn, method, head, body, reused)
            except _Stale:
                if conn is not None:
                    conn.close()
                continue
            except TimeoutError:
                if conn is not None:
                    conn.close()
                raise TransportError(f"{method} timed out after {timeout} s", url=url) from None
            except ProtocolError as e:
                if conn is not None:
                    conn.close()
                raise ProtocolError(f"{method} {url}: {e}") from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                if conn is not None:
                    conn.close()
                raise TransportError(f"{method} failed: {e!r}", url=url) from e
            except BaseException:
                # Cancelled mid-exchange: the connection is in an unknown state.
                if conn is not None:
                    conn.close()
                raise
            if keep and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
            else:
                conn.close()
            return resp
        raise TransportError(f"{method} failed: the connection closed twice", url=url)

    async def close(self) -> None:
        """Closes the kept connections; requests in flight finish on theirs."""
        self._closed = True
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        for c in idle:
            with contextlib.suppress(OSError):
                await c.writer.wait_closed()

    def _take(self) -> tuple[_Conn | None, bool]:
        while self._idle:
            c = self._idle.pop()
            if c.usable():
                return c, True
            c.close()
        return None, False

    async def _connect(self) -> _Conn:
        ep = self.endpoint
        reader, writer = await asyncio.open_connection(
            ep.host,
            ep.port,
            ssl=self._ssl,
            server_hostname=ep.host if self._ssl else None,
            limit=MAX_LINE,
        )
        return _Conn(reader, writer)

    def _head(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        lines = [
            f"{method} {self.endpoint.prefix}{target} HTTP/1.1",
            f"Host: {self.endpoint.host_header}",
            f"User-Agent: {USER_AGENT}",
            "Accept: application/json",
        ]
        for k, v in headers.items():
            if "\r" in k or "\n" in k or "\r" in v or "\n" in v:
                raise ValueError(f"header {k!r}: no line breaks allowed")
            lines.append(f"{k}: {v}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _exchange(
        self, conn: _Conn, method: str, head: bytes, body: bytes | None, reused: bool
    ) -> tuple[Response, bool]:
        try:
            conn.writer.write(head + (body or b""))
            await conn.writer.drain()
            first = await conn.reader.readuntil(b"\r\n")
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            if reused and not (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                raise _Stale from e
            raise
        return await read_response(conn.reader, method, first)


async def read_response(
    reader: asyncio.StreamReader, method: str, first: bytes | None = None
) -> tuple[Response, bool]:
    """Reads one response; the flag says whether the connection can carry another."""
    while True:
        line = first if first is not None else await reader.readuntil(b"\r\n")
        first = None
        version, status, reason = _status_line(line)
        headers = await _headers(reader)
        # 1xx replies (100 Continue) come before the real one.
        if 100 <= status < 200 and status != 101:
            continue
        break
    conn_tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep = "keep-alive" in conn_tokens if version == "HTTP/1.0" else "close" not in conn_tokens
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return Response(status, reason, headers, b""), keep
    te = headers.get("transfer-encoding")
    if te is not None:
        codings = [c.strip().lower() for c in te.split(",") if c.strip()]
        if codings and codings[-1] == "chunked":
            return Response(status, reason, headers, await _chunked(reader)), keep
        # Another coding last: the body runs to the end of the connection.
        return Response(status, reason, headers, await _to_eof(reader)), False
    cl = headers.get("content-length")
    if cl is not None:
        values = {v.strip() for v in cl.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise ProtocolError(f"bad Content-Length {cl!r}")
        n = int(next(iter(values)))
        if n > MAX_BODY:
            raise ProtocolError(f"reply body of {n} bytes is over {MAX_BODY}")
        return Response(status, reason, headers, await reader.readexactly(n)), keep
    return Response(status, reason, headers, await _to_eof(reader)), False


def _status_line(line: bytes) -> tuple[str, int, str]:
    parts = line.rstrip(b"\r\n").decode("latin-1").split(" ", 2)
    if len(parts) < 2 or parts[0] not in ("HTTP/1.1", "HTTP/1.0"):
        raise ProtocolError(f"bad status line {line[:100]!r}")
    if len(parts[1]) != 3 or not parts[1].isdigit():
        raise ProtocolError(f"bad status code in {line[:100]!r}")
    return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else ""


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    found: dict[str, str] = {}
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        total += len(line)
        if total > MAX_HEAD:
            raise ProtocolError(f"reply headers over {MAX_HEAD} bytes")
        if line == b"\r\n":
            return found
        text = line[:-2].decode("latin-1")
        if text[:1] in (" ", "\t"):
            raise ProtocolError("folded header lines are not accepted")
        name, sep, value = text.partition(":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"bad header line {text[:100]!r}")
        k = name.lower()
        v = value.strip()
        found[k] = f"{found[k]}, {v}" if k in found else v


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line[:-2].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size line {line[:100]!r}") from None
        if size < 0 or size_text.startswith((b"-", b"+", b"0x", b"0X")):
            raise ProtocolError(f"bad chunk size line {line[:100]!r}")
        if size == 0:
            break
        total += size
        if total > MAX_BODY:
            raise ProtocolError(f"reply body over {MAX_BODY} bytes")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("a chunk does not end with CRLF")
    # Trailer fields, ignored, up to the blank line.
    await _headers(reader)
    return b"".join(parts)


async def _to_eof(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while chunk := await reader.read(1 << 16):
        total += len(chunk)
        if total > MAX_BODY:
            raise ProtocolError(f"reply body over {MAX_BODY} bytes")
        parts.append(chunk)
    return b"".join(parts)
