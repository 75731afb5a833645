"""A lean HTTP/1.1 client for the load generator's hot path: keep-alive connections, one JSON
POST per request, and the response body read line by line as it streams.

httpx spends about a millisecond of CPU on each streamed request in general machinery (URL
merging, auth and redirect hooks, anyio streams, h11 events). An open-loop generator that
must send a thousand requests a second from one core cannot afford that, so this client does
only what the generator needs, straight on asyncio's transports: ``Client.stream`` behaves
like ``httpx.AsyncClient.stream`` for a POST (``status_code``, ``aread``, ``aiter_lines``).
Bodies may be chunked, sized or closed-delimited; idle connections are reused (newest first)
until they have idled ``KEEPALIVE_EXPIRY_S``. Failures raise the httpx exceptions of the same
meaning, so the generator records them the same way whichever client carried the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json as jsonlib
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

KEEPALIVE_EXPIRY_S = 4.0
"""An idle connection older than this is closed rather than reused. Servers close idle
keep-alive connections after a few seconds (uvicorn, so vLLM: 5 s); reusing one just as the
server closes it would fail the request, so this stays clear of that."""
_MAX_HEAD = 64 * 1024


def direct_url(url: str) -> bool:
    """Whether this client can carry requests to ``url``: http(s), no credentials in the URL
    and no proxy configured for it in the environment (httpx honours those; this does not)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return False
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(parts.hostname))


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection: received bytes are buffered until a reader takes them."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.data = bytearray()
        self.eof = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data
        self._wake()

    def eof_received(self) -> None:
        self.eof = True
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def reusable(self, now: float) -> bool:
        """Idle, open, with nothing unread, and not past the keep-alive expiry."""
        transport = self.transport
        fresh = now - self.idle_since < KEEPALIVE_EXPIRY_S
        is_open = transport is not None and not transport.is_closing()
        return fresh and is_open and not self.eof and not self.data

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def more(self, started: bool) -> None:
        """Wait for more bytes; a closed connection raises (``started``: a response had
        begun, so it was cut short rather than never sent)."""
        if self.eof:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
                if started
                else "Server disconnected without sending a response."
            )
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def read_until(self, separator: bytes, started: bool = True) -> bytes:
        """The bytes before ``separator`` (which is consumed too)."""
        while (end := self.data.find(separator)) < 0:
            if len(self.data) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("response line or header too long")
            await self.more(started)
        taken = bytes(self.data[:end])
        del self.data[: end + len(separator)]
        return taken

    async def read_up_to(self, count: int) -> bytes:
        """At least one and at most ``count`` bytes, as soon as any are there."""
        while not self.data:
            await self.more(True)
        taken = bytes(self.data[:count])
        del self.data[:count]
        return taken

    async def read_available(self) -> bytes:
        """Whatever has arrived, waiting for some; empty once the peer has closed."""
        while not self.data and not self.eof:
            await self.more(True)
        taken = bytes(self.data)
        self.data.clear()
        return taken

    async def read_exactly(self, count: int) -> bytes:
        while len(self.data) < count:
            await self.more(True)
        taken = bytes(self.data[:count])
        del self.data[:count]
        return taken


def _split_lines(pending: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (ended by \\n, \\r\\n or \\r, as httpx splits them) and the rest."""
    if b"\r" in pending:
        # A trailing \r may be the first half of \r\n: leave it for the next piece.
        held = pending.endswith(b"\r")
        body = pending[:-1] if held else pending
        pending = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if held else b"")
    *lines, rest = pending.split(b"\n")
    return lines, rest


class Response:
    """A response whose head has been read; its body is read on demand, once."""

    def __init__(self, connection: _Connection, status_code: int, headers: dict[bytes, bytes]):
        self.status_code = status_code
        self.headers = headers
        self.complete = False
        """The whole body has been read (the connection may then carry another request)."""
        self._connection = connection
        self._reading = False

    async def _pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives, de-chunked."""
        if self._reading:
            raise httpx.StreamConsumed()
        self._reading = True
        connection = self._connection
        if self.status_code in (204, 304):
            pass  # no body, whatever the headers say
        elif b"chunked" in self.headers.get(b"transfer-encoding", b"").lower():
            while size := int((await connection.read_until(b"\r\n")).split(b";")[0], 16):
                yield await connection.read_exactly(size)
                await connection.read_exactly(2)
            while await connection.read_until(b"\r\n"):
                pass  # trailers
        elif (length := self.headers.get(b"content-length")) is not None:
            remaining = int(length)
            while remaining > 0:
                piece = await connection.read_up_to(remaining)
                remaining -= len(piece)
                yield piece
        else:  # delimited by the server closing the connection
            while piece := await connection.read_available():
                yield piece
        self.complete = True

    async def aiter_lines(self) -> AsyncIterator[str]:
        pending = b""
        async for piece in self._pieces():
            lines, pending = _split_lines(pending + piece)
            for line in lines:
                yield line.decode(errors="replace")
        if pending:
            yield pending.rstrip(b"\r").decode(errors="replace")

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self._pieces()])


class Client:
    """Keep-alive connections to one server, opened as needed, none capped: an open-loop
    generator must never wait for a connection (a concurrency cap lives above this)."""

    def __init__(
        self,
        base_url: str,
        ssl_context: ssl.SSLContext | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self._host = parts.hostname or ""
        https = parts.scheme == "https"
        self._tls = (ssl_context or ssl.create_default_context()) if https else None
        self._port = parts.port or (443 if self._tls else 80)
        self._authority = parts.netloc.encode()
        self._prefix = parts.path.rstrip("/")
        self._idle: list[_Connection] = []
        # Sent with every request (an API key's Authorization header), encoded once.
        self._extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in (headers or {}).items())

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    @contextlib.asynccontextmanager
    async def stream(self, method: str, path: str, *, json: Any) -> AsyncIterator[Response]:
        """Send one request with a JSON body; the response streams inside the block."""
        connection = await self._connection()
        assert connection.transport is not None
        connection.transport.write(self._request(method, path, json))
        response: Response | None = None
        try:
            response = await _read_head(connection)
            yield response
        finally:
            if response is not None and response.complete and _keep_alive(response):
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()

    def _request(self, method: str, path: str, body: Any) -> bytes:
        content = jsonlib.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        head = (
            b"%s %s%s HTTP/1.1\r\nhost: %s\r\naccept: */*\r\n%s"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n"
        ) % (
            method.encode(),
            self._prefix.encode(),
            path.encode(),
            self._authority,
            self._extra,
            len(content),
        )
        return head + content

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable(now):
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        server_hostname = self._host if self._tls else None
        try:
            _, connection = await loop.create_connection(
                _Connection, self._host, self._port, ssl=self._tls, server_hostname=server_hostname
            )
        except OSError as exc:  # refused, unreachable, unresolvable, TLS handshake
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return connection


async def _read_head(connection: _Connection) -> Response:
    """The status line and headers (informational 1xx responses skipped)."""
    while True:
        head = await connection.read_until(b"\r\n\r\n", started=False)
        status_line, *lines = head.split(b"\r\n")
        try:
            status_code = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise httpx.RemoteProtocolError(f"bad status line {status_line[:80]!r}") from None
        if not 100 <= status_code < 200:
            break
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return Response(connection, status_code, headers)


def _keep_alive(response: Response) -> bool:
    return response.headers.get(b"connection", b"").lower() != b"close"
