"""The lean HTTP/1.1 client under the load generator, against a scripted loopback server:
bodies framed each way HTTP/1.1 frames them are read line by line, a connection carries
request after request, and a cut or malformed stream is recorded by the load generator, never
raised."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from kneepoint.load.plan import PlannedRequest
from kneepoint.probes.client import http1
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.server.process import free_port

SSE = b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n'
CLOSE = b"<then close>"


def _chunked(*pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n"


def _sized(body: bytes, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body)


class _Scripted(asyncio.Protocol):
    """Answers each request with the next scripted reply: None closes the connection, and so
    does a reply that ends in CLOSE or has neither a length nor chunks."""

    def __init__(self, replies: list[bytes | None], connections: list[int]) -> None:
        self.replies, self.buffer = replies, b""
        connections.append(1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head, sep, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), b"0"))  # fmt: skip
        if not sep or len(rest) < length:
            return
        self.buffer = rest[length:]
        reply = self.replies.pop(0)
        if reply is None:
            self.transport.close()
            return
        self.transport.write(reply.removesuffix(CLOSE))
        if reply.endswith(CLOSE) or not (b"content-length" in reply or b"chunked" in reply):
            self.transport.close()


def _with_server(replies: list[bytes | None], body: Callable[[str], Awaitable[None]]) -> list[int]:
    """Run ``body(url)`` against the scripted server; the connections it accepted."""
    connections: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Scripted(replies, connections), "127.0.0.1", 0)
        async with server:
            await body(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")

    asyncio.run(main())
    return connections


async def _lines(client: http1.Client) -> tuple[int, list[str]]:
    async with client.stream("POST", "/v1/completions", json={"prompt": [1]}) as response:
        return response.status_code, [line async for line in response.aiter_lines()]


def test_framed_bodies_are_read_line_by_line_on_one_connection() -> None:
    split_crlf = _chunked(b"data: one\r", b"\n\r\ndata: tw", b"o\n\n")
    seen: list[tuple[int, list[str]]] = []

    async def body(url: str) -> None:
        async with http1.Client(url) as client:
            for _ in range(3):
                seen.append(await _lines(client))

    connections = _with_server([split_crlf, _sized(SSE), _sized(b"nope", b"503 Busy")], body)
    assert seen[0] == (200, ["data: one", "", "data: two", ""])
    assert seen[1] == (200, ['data: {"choices":[{"text":"a"}]}', "", "data: [DONE]", ""])
    assert seen[2] == (503, ["nope"])
    assert len(connections) == 1, "a connection whose body was read whole is reused"


def test_a_body_ended_by_closing_needs_a_new_connection() -> None:
    closed = b"HTTP/1.1 200 OK\r\n\r\n" + SSE
    seen: list[tuple[int, list[str]]] = []

    async def body(url: str) -> None:
        async with http1.Client(url) as client:
            seen.append(await _lines(client))
            seen.append(await _lines(client))

    connections = _with_server([closed, _sized(SSE)], body)
    assert seen[0] == seen[1] and seen[0][1][-2:] == ["data: [DONE]", ""]
    assert len(connections) == 2


def test_cut_and_malformed_streams_are_recorded_not_raised() -> None:
    cut = _chunked(SSE).split(b"data: [DONE]")[0] + CLOSE
    bad_chunk = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"
    replies = [cut, None, bad_chunk, None, _sized(b'{"error":{"message":"overloaded"}}', b"503 X")]
    plan = [PlannedRequest(i, i * 0.05, "c", (5, 6), 2) for i in range(5)]
    records = []

    async def body(url: str) -> None:
        records.extend(await run_load(url, plan, LoadOptions(model="m", request_timeout_s=5)))

    _with_server(replies, body)
    assert records[0].error is not None and records[0].error.startswith("RemoteProtocolError")
    assert records[1].error is not None and "disconnected" in records[1].error
    assert records[2].error is not None and records[2].error.startswith("bad stream")
    assert records[4].error == "HTTP 503: overloaded"
    assert not any(r.ok for r in records)


def test_a_refused_connection_is_a_connect_error() -> None:
    async def main() -> None:
        async with http1.Client(f"http://127.0.0.1:{free_port()}") as client:
            with pytest.raises(httpx.ConnectError):
                await _lines(client)

    asyncio.run(main())


def test_proxies_and_credentials_are_left_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert http1.direct_url("http://127.0.0.1:8000")
    assert not http1.direct_url("http://user:key@127.0.0.1:8000")
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert not http1.direct_url("http://example.com:8000")
    monkeypatch.setenv("no_proxy", "example.com")
    assert http1.direct_url("http://example.com:8000")
