"""The simulated engine on the wall clock, for the HTTP server.

One asyncio task runs the engine: each step's result is held back until the wall clock reaches
the step's simulated end, then its tokens are handed to the waiting streams. Requests that
arrive during a step join the next one, as in vLLM. How late each step's tokens go out (the
clock lag) is recorded: a server that cannot keep up with its own simulated clock must say so.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from kneepoint.sim.engine import Arrival, SimEngine, StepOutcome, StepRecord
from kneepoint.sim.metrics import VllmMetrics
from kneepoint.sim.request import SimRequest

# Steps kept for telemetry windows (a few minutes of a busy engine).
_RECENT_STEPS = 200_000
_RECENT_LAGS = 100_000


@dataclass(eq=False)
class Stream:
    """One request's progress as its HTTP handler sees it."""

    request: SimRequest
    produced: int = 0
    done: bool = False
    updated: asyncio.Event = field(default_factory=asyncio.Event)


class RealtimeEngine:
    """Drives a SimEngine so that simulated time tracks the event loop's clock."""

    def __init__(self, engine: SimEngine, metrics: VllmMetrics) -> None:
        self.engine, self.metrics = engine, metrics
        self.steps: deque[StepRecord] = deque(maxlen=_RECENT_STEPS)
        self.lags_s: deque[float] = deque(maxlen=_RECENT_LAGS)
        self._streams: dict[int, Stream] = {}
        self._wake = asyncio.Event()
        self._origin = asyncio.get_running_loop().time()
        self._seen_queries = self._seen_hits = 0

    def now(self) -> float:
        """Seconds since the engine started, on the event loop's clock."""
        return asyncio.get_running_loop().time() - self._origin

    def submit(self, prompt: tuple[int, ...], max_tokens: int) -> Stream:
        """Queue a request now (raises RequestRejectedError as vLLM would answer 400)."""
        req = self.engine.submit(Arrival(self.now(), prompt, max_tokens))
        req.arrival_s = req.queued_s = self.now()  # the engine's clock may be ahead, mid-step
        stream = Stream(req)
        self._streams[req.rid] = stream
        self._wake.set()
        return stream

    def abort(self, stream: Stream) -> None:
        """The client went away: free the request's place and blocks."""
        if not stream.done:
            self.engine.scheduler.abort(stream.request)
            self._streams.pop(stream.request.rid, None)
            stream.done = True

    async def run(self) -> None:
        """Step forever; sleep while idle."""
        loop = asyncio.get_running_loop()
        engine = self.engine
        while True:
            if not engine.busy:
                self._wake.clear()
                await self._wake.wait()
                engine.now_s = max(engine.now_s, self.now())
                continue
            outcome = engine.step()
            if outcome is None:  # nothing schedulable until something changes
                self._wake.clear()
                await self._wake.wait()
                continue
            due = self._origin + engine.now_s
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = max(0.0, loop.time() - due)
            self.lags_s.append(lag)
            self.metrics.clock_lag.observe(lag)
            self._publish(outcome)

    def _publish(self, outcome: StepOutcome) -> None:
        self.metrics.observe_step(outcome.record, len(outcome.sampled))
        kv = self.engine.kv
        self.metrics.observe_admission(
            kv.query_tokens - self._seen_queries, kv.hit_tokens - self._seen_hits
        )
        self._seen_queries, self._seen_hits = kv.query_tokens, kv.hit_tokens
        self.steps.append(outcome.record)
        for req in outcome.sampled:
            stream = self._streams.get(req.rid)
            if stream is not None:
                stream.produced = req.num_output
                stream.updated.set()
        for req in outcome.finished:
            self.metrics.observe_finished(req)
            stream = self._streams.pop(req.rid, None)
            if stream is not None:
                stream.done = True
                stream.updated.set()
