"""A minimal, fast OpenAI-compatible streaming endpoint for measuring load generators.

It answers every request at once, so that what a load generator measures against it is the
generator's own cost: `/v1/completions` and `/v1/chat/completions` stream one SSE chunk per
requested token (`max_tokens`, capped), then, where `stream_options` asks as vLLM reads it, a
usage chunk (and usage in every chunk for `continuous_usage_stats`), then `data: [DONE]`, all
in one write; `/v1/models` and `/health` answer what clients check before they start. It is a
raw asyncio protocol speaking HTTP/1.1 with keep-alive (uvloop when it is installed), and pins
itself to one CPU core.

It also times itself: for each generation request, from having the whole request in hand to
having written the whole answer. `GET /stats` returns the median and p99 of those times and
`POST /stats` returns and clears them, so a benchmark can subtract the endpoint's own share.

    python benchmarks/fast_sse_server.py [--port 0] [--cpu 0] [--tokens-cap 64]

Prints `listening on PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from functools import lru_cache
from typing import Any

_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed"}
_MAX_HEAD = 64 * 1024


class Stats:
    """The endpoint's own handling time per generation request, in seconds."""

    def __init__(self) -> None:
        self.times_s: list[float] = []

    def summary(self) -> dict[str, float]:
        times = sorted(self.times_s)
        if not times:
            return {"count": 0, "p50_us": 0.0, "p99_us": 0.0}
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        return {"count": len(times), "p50_us": statistics.median(times) * 1e6, "p99_us": p99 * 1e6}


def _response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (
        status,
        _REASONS.get(status, b"Error"),
        content_type,
        len(body),
    )
    return head + body


def _error(status: int, message: str) -> bytes:
    return _response(status, json.dumps({"error": {"message": message, "code": status}}).encode())


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Token ids count as given; text counts one token per word (no tokenizer here)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return len(prompt)
    if isinstance(prompt, str):
        return len(prompt.split())
    messages = body.get("messages") or []
    return sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))


@lru_cache(maxsize=4096)
def _stream(
    chat: bool, model: str, prompt: int, tokens: int, *, usage: bool, continuous: bool
) -> bytes:
    """The whole SSE answer; the same request always gets the same bytes, so it is built once."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    events = []
    for n in range(1, tokens + 1):
        finish = "length" if n == tokens else None
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if chat:
            choice["delta"] = (
                {"role": "assistant", "content": " tok"} if n == 1 else {"content": " tok"}
            )
        else:
            choice["text"] = " tok"
        chunk: dict[str, Any] = {"id": "cmpl-fast", "object": kind, "created": 0, "model": model,
                                 "choices": [choice]}  # fmt: skip
        if continuous:
            chunk["usage"] = _usage(prompt, n)
        events.append(chunk)
    if usage:
        events.append({"id": "cmpl-fast", "object": kind, "created": 0, "model": model,
                       "choices": [], "usage": _usage(prompt, tokens)})  # fmt: skip
    text = "".join(f"data: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events)
    return _response(200, (text + "data: [DONE]\n\n").encode(), b"text/event-stream")


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}  # fmt: skip


@lru_cache(maxsize=4096)
def _whole(chat: bool, model: str, prompt: int, tokens: int) -> bytes:
    """A non-streamed answer, for clients that do not ask for a stream."""
    text = " tok" * tokens
    if chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "text": text}
    choice["finish_reason"] = "length"
    kind = "chat.completion" if chat else "text_completion"
    body = {"id": "cmpl-fast", "object": kind, "created": 0, "model": model,
            "choices": [choice], "usage": _usage(prompt, tokens)}  # fmt: skip
    return _response(200, json.dumps(body).encode())


class Endpoint:
    """What each route answers."""

    def __init__(self, model: str, tokens_cap: int) -> None:
        self.model = model
        self.tokens_cap = tokens_cap
        self.stats = Stats()

    def answer(self, method: bytes, path: bytes, raw: bytes) -> bytes:
        route = path.split(b"?", 1)[0]
        if route in (b"/v1/completions", b"/v1/chat/completions"):
            if method != b"POST":
                return _error(405, "POST only")
            return self._generate(route == b"/v1/chat/completions", raw)
        if route == b"/health":
            return _response(200, b"{}")
        if route == b"/v1/models":
            models = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            return _response(200, json.dumps(models).encode())
        if route == b"/stats":
            summary = self.stats.summary()
            if method == b"POST":
                self.stats = Stats()
            return _response(200, json.dumps(summary).encode())
        return _error(404, f"no route {route.decode(errors='replace')}")

    def _generate(self, chat: bool, raw: bytes) -> bytes:
        try:
            body = json.loads(raw)
            model = str(body.get("model") or self.model)
            requested = body.get("max_tokens") or body.get("max_completion_tokens") or 16
            tokens = max(1, min(int(requested), self.tokens_cap))
            prompt = _prompt_tokens(body)
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"bad request body: {exc}")
        if not body.get("stream"):
            return _whole(chat, model, prompt, tokens)
        options = body.get("stream_options") or {}
        usage = bool(options.get("include_usage"))
        continuous = usage and bool(options.get("continuous_usage_stats"))  # as vLLM has it
        return _stream(chat, model, prompt, tokens, usage=usage, continuous=continuous)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection: requests parsed as their bytes arrive, answered in order."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None and self._answer_one():
            pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def _answer_one(self) -> bool:
        """Answer the first complete request in the buffer; False when there is none yet."""
        assert self.transport is not None
        started = time.perf_counter()
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > _MAX_HEAD:
                self.transport.write(_error(400, "header too large"))
                self.transport.close()
            return False
        lines = self.buffer[:end].split(b"\r\n")
        headers = dict(_header(line) for line in lines[1:])
        length = int(headers.get(b"content-length", b"0"))
        if len(self.buffer) < end + 4 + length:
            return False
        method, path, _ = lines[0].split(b" ", 2)
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        self.transport.write(self.endpoint.answer(method, path, body))
        if path.startswith((b"/v1/completions", b"/v1/chat/completions")):
            self.endpoint.stats.times_s.append(time.perf_counter() - started)
        if headers.get(b"connection", b"").lower() == b"close":
            self.transport.close()
            return False
        return True


def _header(line: bytes) -> tuple[bytes, bytes]:
    name, _, value = line.partition(b":")
    return name.strip().lower(), value.strip()


async def serve(host: str, port: int, endpoint: Endpoint) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpConnection(endpoint), host, port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on {bound}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core")
    parser.add_argument("--model", default="fast-sse")
    parser.add_argument("--tokens-cap", type=int, default=64, help="most tokens per answer")
    args = parser.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    endpoint = Endpoint(args.model, args.tokens_cap)
    try:
        import uvloop  # type: ignore[import-not-found]

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(serve(args.host, args.port, endpoint))


if __name__ == "__main__":
    main()
