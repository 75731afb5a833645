"""`kneepoint sim serve`: the simulated engine behind vLLM's OpenAI-compatible HTTP API.

Routes: /v1/completions and /v1/chat/completions (streamed as server-sent events, with a final
usage chunk when asked), /v1/models, /health, /metrics (vLLM's names) and /telemetry (NVML/GPM-
style GPU counters over the last ``window_s`` seconds, default 1). Startup logs KV capacity in
vLLM's words, so a launcher that parses vLLM's log can parse ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator

import structlog
import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kneepoint.config import first_problem
from kneepoint.physics import Efficiency
from kneepoint.sim.access import ApiKeyGuard, is_loopback
from kneepoint.sim.engine import RequestRejectedError, SimEngine
from kneepoint.sim.fault_server import (
    HangWhenHung,
    Injector,
    cut,
    dropped,
    refuse_start,
)
from kneepoint.sim.metrics import VllmMetrics
from kneepoint.sim.openai_api import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    Responder,
    chat_prompt,
    completion_prompt,
    sse_event,
    token_text,
)
from kneepoint.sim.realtime import RealtimeEngine, Stream
from kneepoint.sim.serve_args import ServeArgs
from kneepoint.sim.telemetry import GpuTelemetry

log = structlog.get_logger("kneepoint.sim.server")


def startup_lines(engine: SimEngine) -> list[str]:
    """vLLM's startup report of the KV cache, in its wording."""
    plan = engine.memory
    return [
        f"GPU KV cache size: {plan.kv_tokens:,} tokens",
        f"Maximum concurrency for {plan.max_model_len:,} tokens per request: "
        f"{plan.max_concurrency:.2f}x",
    ]


class SimServer:
    """The app and the engine task behind it."""

    def __init__(self, args: ServeArgs, engine: SimEngine) -> None:
        self.args, self.engine = args, engine
        cache_dtype = args.engine.kv_cache_dtype or "auto"
        self.metrics = VllmMetrics(
            args.served_model_name, engine.resolved, engine.memory, cache_dtype
        )
        self.telemetry = GpuTelemetry(args.gpu, engine.memory, engine.roofline.linear_peak_tflops)
        self.realtime: RealtimeEngine | None = None
        self.injector = Injector(args.faults)
        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.models),
            Route("/health", self.health),
            Route("/metrics", self.prometheus),
            Route("/telemetry", self.gpu),
        ]
        self.app = HangWhenHung(Starlette(routes=routes, lifespan=self._lifespan), self.injector)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Starlette) -> AsyncIterator[None]:
        await self.injector.slow_start()
        self.realtime = RealtimeEngine(self.engine, self.metrics)
        task = asyncio.create_task(self.realtime.run())
        for line in startup_lines(self.engine):
            log.info(line)
        timers = self.injector.timers(on_hang=task.cancel)  # a hung engine steps no more
        try:
            yield
        finally:
            for running in (task, *timers):
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    def _rt(self) -> RealtimeEngine:
        assert self.realtime is not None, "the engine task starts with the app"
        return self.realtime

    async def health(self, _: Request) -> Response:
        return Response(status_code=200)

    async def prometheus(self, _: Request) -> Response:
        text = self.injector.metrics(self.metrics.render())
        return Response(text, media_type="text/plain; version=0.0.4")

    async def models(self, _: Request) -> Response:
        name = self.args.served_model_name
        # vLLM's root is what it was started with (a path or Hugging Face id), not its alias.
        card = {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": self.args.engine.model,
            "parent": None,
            "max_model_len": self.engine.resolved.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def gpu(self, request: Request) -> Response:
        if (refused := self.injector.telemetry()) is not None:
            return refused
        rt = self._rt()
        try:
            window = float(request.query_params.get("window_s", "1"))
        except ValueError:
            window = -1.0
        if not 0 < window <= 600:
            return _error(ApiError(400, "window_s must be a number of seconds in (0, 600]"))
        end = rt.now()
        sample = self.telemetry.sample(rt.steps, max(0.0, end - window), end)
        return JSONResponse(sample.model_dump())

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, "completion")

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def _generate(self, request: Request, kind: str) -> Response:
        try:
            body = await request.json()
            if kind == "chat":
                parsed: CompletionRequest | ChatRequest = ChatRequest.model_validate(body)
                prompt = chat_prompt(parsed)  # type: ignore[arg-type]
            else:
                parsed = CompletionRequest.model_validate(body)
                prompt = completion_prompt(parsed)
            max_tokens = self._checked_max_tokens(parsed, len(prompt))
            fault = self.injector.request_fault(streamed=parsed.stream)
            if fault == "5xx":
                raise ApiError(500, "EngineCore encountered an issue.", "InternalServerError")
            stream = None if fault == "reset" else self._rt().submit(prompt, max_tokens)
        except ApiError as exc:
            return _error(exc)
        except json.JSONDecodeError:
            return _error(ApiError(400, "the request body is not JSON"))
        except ValidationError as exc:
            return _error(ApiError(400, first_problem(exc)))
        except RequestRejectedError as exc:
            return _error(ApiError(400, str(exc)))
        responder = Responder(kind, self.args.served_model_name, len(prompt))
        if not parsed.stream:
            assert stream is not None  # connections drop only under a stream
            return await self._whole(stream, responder)
        options = parsed.stream_options
        usage = options is not None and options.include_usage
        continuous = usage and options is not None and options.continuous_usage_stats
        if stream is None:  # the connection drops before the first token
            body = dropped()
        else:
            events = self._events(stream, responder, usage, continuous)
            body = cut(events, 1) if fault == "cut" else events
        return StreamingResponse(body, media_type="text/event-stream")

    def _checked_max_tokens(self, parsed: CompletionRequest | ChatRequest, prompt_len: int) -> int:
        """The request's max_tokens, after refusing a wrong model name or n > 1."""
        if parsed.model is not None and parsed.model != self.args.served_model_name:
            raise ApiError(404, f"The model `{parsed.model}` does not exist.", "NotFoundError")
        if parsed.n != 1:
            raise ApiError(400, "the simulator serves n=1 only")
        chosen = parsed.max_tokens
        if isinstance(parsed, ChatRequest) and parsed.max_completion_tokens is not None:
            chosen = parsed.max_completion_tokens
        # vLLM's default: whatever room the context leaves.
        return (
            chosen
            if chosen is not None
            else max(1, self.engine.resolved.max_model_len - prompt_len)
        )

    async def _whole(self, stream: Stream, responder: Responder) -> Response:
        try:
            while not stream.done:
                await stream.updated.wait()
                stream.updated.clear()
        finally:
            self._rt().abort(stream)
        output = stream.request.output
        text = "".join(token_text(t) for t in output)
        return JSONResponse(responder.whole(text, len(output)))

    async def _events(
        self, stream: Stream, responder: Responder, usage: bool, continuous: bool
    ) -> AsyncGenerator[bytes]:
        """One SSE event per chunk: the first token at once, then ``stream_interval`` at a
        time, the rest at the end (vLLM's --stream-interval)."""
        interval = self.engine.resolved.stream_interval
        sent = 0
        try:
            while True:
                await stream.updated.wait()
                stream.updated.clear()
                ready = stream.produced - sent
                if ready <= 0 and stream.done:
                    break
                if ready <= 0 or not (sent == 0 or ready >= interval or stream.done):
                    continue
                output = stream.request.output  # a range over the ids so far: read it anew
                text = "".join(token_text(t) for t in output[sent : stream.produced])
                sent = stream.produced
                reason = "length" if stream.done else None
                so_far = sent if continuous else None
                yield responder.chunk_event(text, reason, first=sent == ready, so_far=so_far)
                if stream.done:
                    break
            if usage:
                yield sse_event(responder.usage_chunk(sent))
            yield b"data: [DONE]\n\n"
        finally:
            self._rt().abort(stream)


def _error(exc: ApiError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status)


def build_server(args: ServeArgs, efficiency: Efficiency | None = None) -> SimServer:
    """The server for these arguments (raises EngineRefusedError if vLLM would not start)."""
    refuse_start(args.faults)
    return SimServer(args, SimEngine(args.gpu, args.model, args.engine, efficiency, eager=True))


def serve(server: SimServer, api_key: str | None = None) -> None:
    """Serve until interrupted; with ``api_key``, /v1 answers only requests carrying it."""
    app = server.app if api_key is None else ApiKeyGuard(server.app, api_key)
    if not is_loopback(server.args.host):
        log.warning(
            "server.exposed",
            host=server.args.host,
            port=server.args.port,
            why="--host is not a loopback address: reachable from the network",
        )
    # The asyncio loop even where uvloop is installed (as in vLLM's environments): the engine
    # paces steps by loop.time(), which uvloop keeps to the millisecond and refreshes once per
    # loop pass; on uvloop 0.23 its clock lag p99 at 77.5 req/s was 10 ms, on asyncio 2 ms
    # (benchmarks/sim_speed.py's HTTP point, this 2-core machine).
    config = uvicorn.Config(
        app,
        host=server.args.host,
        port=server.args.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        # Whoever stops a simulated server is done measuring it: a stream still open (a hung
        # or interrupted point) gets 1 s, not uvicorn's wait for every connection.
        timeout_graceful_shutdown=1,
        loop="asyncio",
    )
    uvicorn.Server(config).run()
