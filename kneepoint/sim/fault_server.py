"""The faults of ``kneepoint sim serve --fault-*``, acted out by a live HTTP server.

Each one behaves as the real failure does from outside the process: an out-of-memory start
exits with vLLM's words, a crash kills the process with a CUDA error, a hang keeps the socket
open and answers nothing (the engine stops too), a slow start loads for a while before it
binds, and per-request faults answer 500, drop the connection before the first token, or cut
a stream after it. Every injection logs one ``kneepoint-fault:`` line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Literal

import structlog
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kneepoint.physics import StartupRefusal
from kneepoint.records import CRASH_TEXT, MARKER, OOM_TEXT, Faults
from kneepoint.sim.engine import EngineRefusedError

log = structlog.get_logger("kneepoint.sim.faults")
RequestFault = Literal["5xx", "reset", "cut"]
MALFORMED_METRICS = "vllm:num_requests_running{engine=0 12\n# TYPE broken\n\x00"
"""Not Prometheus text: an unquoted label value, a TYPE line without a type, a NUL byte."""


class StreamCutError(ConnectionError):
    """Raised inside a streamed body: the server drops the connection, as a dying worker or
    a proxy timeout does."""


def refuse_start(faults: Faults) -> None:
    """Raise vLLM's out-of-memory refusal when the start-up fault is on."""
    if faults.startup_oom:
        log.warning(f"{MARKER} startup_oom")
        raise EngineRefusedError(StartupRefusal(kind="weights_oom", message=OOM_TEXT))


class Injector:
    """The faults one server acts out, and the state they need (timers, request count)."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.hung = False
        self._requests = 0
        self._metrics_said = self._nvml_said = False

    async def slow_start(self) -> None:
        """Load for ``slow_start_s`` before serving, saying so every second (vLLM logs while
        it loads weights; a silent start would be taken for a hang)."""
        left = self.faults.slow_start_s
        if left > 0:
            log.warning(f"{MARKER} slow_start", seconds=left)
        while left > 0:
            log.info("Loading weights took longer than usual (simulated slow start)")
            await asyncio.sleep(min(1.0, left))
            left -= 1.0

    def timers(self, on_hang: Callable[[], object]) -> list[asyncio.Task[None]]:
        """The crash and hang timers, started when the server is up."""
        tasks = []
        if self.faults.crash_after_s is not None:
            tasks.append(asyncio.create_task(self._crash(self.faults.crash_after_s)))
        if self.faults.hang_after_s is not None:
            tasks.append(asyncio.create_task(self._hang(self.faults.hang_after_s, on_hang)))
        return tasks

    async def _crash(self, after_s: float) -> None:
        await asyncio.sleep(after_s)
        log.warning(f"{MARKER} crash", after_s=after_s)
        log.error(CRASH_TEXT)
        logging.shutdown()  # the log is what the launcher classifies the death from
        sys.stderr.flush()
        os._exit(1)

    async def _hang(self, after_s: float, on_hang: Callable[[], object]) -> None:
        await asyncio.sleep(after_s)
        log.warning(f"{MARKER} hang", after_s=after_s)
        self.hung = True
        on_hang()

    def request_fault(self, streamed: bool) -> RequestFault | None:
        """The fault the next generation request meets (a fixed draw per arrival); a
        connection drop or cut only where the answer is streamed."""
        self._requests += 1
        fault = self.faults.request_fault(self._requests)
        if fault in ("reset", "cut") and not streamed:
            return None
        if fault is not None:
            log.warning(f"{MARKER} {fault}", request=self._requests)
        return fault

    def metrics(self, text: bytes) -> bytes:
        if not self.faults.malformed_metrics:
            return text
        if not self._metrics_said:
            log.warning(f"{MARKER} malformed_metrics")
            self._metrics_said = True
        return MALFORMED_METRICS.encode()

    def telemetry(self) -> Response | None:
        """The GPU counters' answer when NVML is absent (404) or failing (500); None: served."""
        kind = self.faults.nvml
        if kind == "ok":
            return None
        if not self._nvml_said:
            log.warning(f"{MARKER} nvml_{kind}")
            self._nvml_said = True
        if kind == "absent":
            return JSONResponse({"error": "NVML Shared Library Not Found"}, status_code=404)
        return JSONResponse({"error": "NVMLError_Unknown: Unknown Error"}, status_code=500)


async def cut(events: AsyncGenerator[bytes], after: int) -> AsyncIterator[bytes]:
    """``events`` until ``after`` of them are sent, then the connection is dropped (the
    request aborted in the engine, as vLLM aborts one whose client is gone)."""
    sent = 0
    try:
        async for event in events:
            if sent >= after:
                break
            yield event
            sent += 1
    finally:
        await events.aclose()
    raise StreamCutError(f"stream cut after {sent} events")


async def dropped() -> AsyncIterator[bytes]:
    """A body that drops the connection before its first byte."""
    raise StreamCutError("connection dropped before the first token")
    yield b""  # pragma: no cover - makes this an async generator


class HangWhenHung:
    """ASGI middleware: once the server hangs, every request (``/health`` too) is accepted
    and never answered, as a wedged engine's API server behaves."""

    def __init__(self, app: ASGIApp, injector: Injector) -> None:
        self.app, self.injector = app, injector

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.injector.hung:
            await asyncio.Event().wait()

        async def stalled_once_hung(message: Message) -> None:
            # A wedged engine stops every stream, not only new requests: answers in flight
            # that kept streaming would read as a live server for as long as they ran.
            if self.injector.hung:
                await asyncio.Event().wait()
            await send(message)

        await self.app(scope, receive, stalled_once_hung)
