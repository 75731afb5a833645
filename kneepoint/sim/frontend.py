"""The API server in front of the simulated engine, on the virtual clock.

vLLM's OpenAI server is one Python event loop: it takes each request in (HTTP, validation,
tokenisation, the hand-off to the engine core) and streams every engine step's tokens out
(detokenise, serialise, write one chunk per request), one piece of work after another. Under
load that loop is a queue in its own right, and the real H100 recordings show it:

- At 40 req/s (base, tests/fixtures/real) vLLM's waiting queue is empty, yet TTFT p50 is 329 ms
  against 29 ms at 8 req/s: requests wait in the API server, not in the engine.
- There, ITL p50 is 0.89 of the mean token gap (17.6 / 19.7 ms) although about half of the
  engine's steps carry no prefill and run ~12 ms: tokens leave at the pace the server can
  stream a step's ~167 chunks, not at the pace of each step. At 32 req/s, with ~95 chunks a
  step, the engine still sets the pace (p50 10.0 ms, decode-only steps ~10 ms).

The model is a single server working first come, first served. A step's output costs
``frontend_chunk_s`` per chunk it streams, and its tokens reach the client when that is done.
A request's intake is quick beside it, but waits its turn: it reaches the engine once the
output queued before it is streamed, ``frontend_latency_s`` later (the part that queues for
nothing: the network, HTTP, the hand-off between processes). The HTTP simulator
(``kneepoint sim serve``) has a real API server in front of its engine and adds no model of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kneepoint.records.efficiency import Efficiency


@dataclass(slots=True)
class FrontEnd:
    """One API server thread; times are on the engine's virtual clock."""

    latency_s: float
    chunk_s: float
    free_at_s: float = 0.0
    """When the thread has finished all the work handed to it so far."""
    delivered_s: dict[float, float] = field(default_factory=dict)
    """Engine step end -> when that step's tokens reach the client."""

    @classmethod
    def of(cls, efficiency: Efficiency) -> FrontEnd:
        return cls(efficiency.frontend_latency_s, efficiency.frontend_chunk_s)

    def intake(self, arrival_s: float) -> float:
        """When a request that arrived at ``arrival_s`` reaches the engine."""
        return self._serve(arrival_s, 0.0) + self.latency_s

    def stream(self, step_end_s: float, chunks: float) -> None:
        """Queue the output of a step that ended at ``step_end_s`` and streams ``chunks``."""
        delivered = self._serve(step_end_s, self.chunk_s * chunks)
        if delivered != step_end_s:  # only what the server held back: ``seen_at`` says the rest
            self.delivered_s[step_end_s] = delivered

    def seen_at(self, token_time_s: float) -> float:
        """When the client sees a token the engine produced at ``token_time_s`` (a step end)."""
        return self.delivered_s.get(token_time_s, token_time_s)

    def seen_all(self, token_times_s: Sequence[float], start_s: float = 0.0) -> list[float]:
        """``seen_at`` of each time, less ``start_s``: one pass (a load point has ~10^5)."""
        get = self.delivered_s.get
        return [get(t, t) - start_s for t in token_times_s]

    def _serve(self, ready_s: float, work_s: float) -> float:
        self.free_at_s = max(self.free_at_s, ready_s) + work_s
        return self.free_at_s
