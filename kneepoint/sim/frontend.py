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

The model is a single server working first come, first served; ``--api-server-count N``
splits the streaming among N such servers (vLLM's API-server scale-out, PR #17546: each
process takes its own connections and streams its own requests' tokens), modeled as one
server N times as fast, which holds where each has a core of its own (a GPU host's). A step's
output costs ``frontend_chunk_s`` per chunk it streams, and its tokens reach the client when
that is done.
A request's intake is quick beside it, but waits its turn: it reaches the engine once the
output queued before it is streamed, ``frontend_latency_s`` later (the part that queues for
nothing: the network, HTTP, the hand-off between processes). The HTTP simulator
(``kneepoint sim serve``) has a real API server in front of its engine and adds no model of one.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from kneepoint.records import Efficiency


@dataclass(slots=True)
class FrontEnd:
    """One API server thread; times are on the engine's virtual clock."""

    latency_s: float
    chunk_s: float
    free_at_s: float = 0.0
    """When the thread has finished all the work handed to it so far."""
    delivered_s: dict[float, float] = field(default_factory=dict)
    """Engine step end -> when that step's tokens reach the client."""
    _ends_s: list[float] = field(default_factory=list)
    _busy_s: list[float] = field(default_factory=list)
    """Each piece of work's end, and the thread's busy seconds up to it (work is serial, so
    both ascend)."""

    @classmethod
    def of(cls, efficiency: Efficiency, servers: float = 1.0) -> FrontEnd:
        return cls(efficiency.frontend_latency_s, efficiency.frontend_chunk_s / servers)

    def busy_pct(self, start_s: float, end_s: float) -> float | None:
        """The thread's CPU over a window (100 = busy throughout), as a real API-server
        process's would be read; None where it streams at no cost (no model of it)."""
        if self.chunk_s <= 0 or end_s <= start_s:
            return None
        return 100.0 * (self._busy_until(end_s) - self._busy_until(start_s)) / (end_s - start_s)

    def _busy_until(self, t_s: float) -> float:
        i = bisect.bisect_right(self._ends_s, t_s)
        before = self._busy_s[i - 1] if i else 0.0
        if i == len(self._ends_s):
            return before
        # The piece of work under way at t_s counts up to t_s.
        length = self._busy_s[i] - before
        return before + max(0.0, t_s - (self._ends_s[i] - length))

    def intake(self, arrival_s: float) -> float:
        """When a request that arrived at ``arrival_s`` reaches the engine."""
        return self.pick_up(arrival_s) + self.latency_s

    def pick_up(self, arrival_s: float) -> float:
        """When the server gets to a request that arrived at ``arrival_s``, after the output
        queued before it: where vLLM stamps its arrival (the renderer's ``time.time()``,
        vllm/v1/engine/input_processor.py), so its own TTFT leaves out the wait before."""
        return self._serve(arrival_s, 0.0)

    def stream(self, step_end_s: float, chunks: float, step_s: float = 0.0) -> bool:
        """Queue the output of a step that ended at ``step_end_s`` and streams ``chunks``;
        whether it waits longer than the step itself (``step_s``) behind output the server is
        still streaming: the server's backlog is then more than a step deep, and it, not the
        engine, sets the pace tokens reach the client. (A wait shorter than a step is the
        server keeping up: Llama-3.1-8B behind one API server at 89% busy, many of whose
        steps wait a little, serves no more with two: 29.3 and 29.5 req/s, simulated.)"""
        held = self.free_at_s - step_end_s > step_s
        delivered = self._serve(step_end_s, self.chunk_s * chunks)
        if delivered != step_end_s:  # only what the server held back: ``seen_at`` says the rest
            self.delivered_s[step_end_s] = delivered
        return held

    def seen_at(self, token_time_s: float) -> float:
        """When the client sees a token the engine produced at ``token_time_s`` (a step end)."""
        return self.delivered_s.get(token_time_s, token_time_s)

    def seen_all(self, token_times_s: Sequence[float], start_s: float = 0.0) -> list[float]:
        """``seen_at`` of each time, less ``start_s``: one pass (a load point has ~10^5)."""
        get = self.delivered_s.get
        if start_s == 0.0:  # a fresh engine's point: less nothing, a third faster
            return list(map(get, token_times_s, token_times_s))
        return [get(t, t) - start_s for t in token_times_s]

    def _serve(self, ready_s: float, work_s: float) -> float:
        self.free_at_s = max(self.free_at_s, ready_s) + work_s
        if work_s > 0:
            self._ends_s.append(self.free_at_s)
            self._busy_s.append((self._busy_s[-1] if self._busy_s else 0.0) + work_s)
        return self.free_at_s
