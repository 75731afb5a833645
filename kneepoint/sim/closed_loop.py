"""A client that waits on answers, on the virtual clock: sessions and a cap on requests in
flight, as the HTTP load generator runs them.

A plan's request is due at its time, or, as a session's later turn, ``think_s`` after the
client saw its predecessor's last token (and never, if that one failed: it is recorded as not
sent). A due request waits for one of ``max_concurrency`` slots; a slot frees when the client
sees a request's end, or when the request's time runs out (the client cuts it off, as the HTTP
client does; the engine goes on computing it, as a server whose client went away would until
it noticed). Latency counts from the due time: a wait for a slot is the server's slowness.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.load import PlannedRequest
from kneepoint.sim.client import Arrival, Client
from kneepoint.sim.request import SimRequest

_DUE, _END, _DEADLINE = 0, 1, 2


@dataclass(slots=True)
class Outcome:
    """What became of one planned request, on the engine's clock."""

    due_s: float | None = None
    sent_s: float | None = None
    req: SimRequest | None = None
    error: str | None = None
    ended: bool = False
    dropped: bool = False
    """A later turn that fell due after the point's span: not sent, not recorded."""


class ClosedLoop(Client):
    """Sends a plan whose requests wait on others' ends, or on free slots."""

    def __init__(
        self,
        plan: Sequence[PlannedRequest],
        start_s: float,
        *,
        max_concurrency: int | None,
        timeout_s: float,
    ) -> None:
        self._plan = {p.index: p for p in plan}
        self._next = {p.after: p.index for p in plan if p.after is not None}
        self._free = max_concurrency if max_concurrency is not None else len(plan) + 1
        self._timeout_s, self._start_s = timeout_s, start_s
        self.outcomes = {p.index: Outcome() for p in plan}
        self._events: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._waiting: deque[int] = deque()
        self._sent: list[Arrival] = []
        self._open = len(plan)
        for p in plan:
            if p.after is None:
                self._push(start_s + p.at_s, _DUE, p.index)

    @property
    def done(self) -> bool:
        return self._open == 0

    def take(self, now_s: float) -> list[Arrival]:
        events = self._events
        while events and events[0][0] <= now_s:
            at, _, kind, index = heapq.heappop(events)
            if kind == _DUE:
                self._due(index, at)
            elif kind == _END:
                self._end(index, at, None)
            else:
                self._end(index, at, f"timed out {self._timeout_s:g} s after its scheduled time")
        sent, self._sent = self._sent, []
        return sent

    def next_at(self) -> float | None:
        return self._events[0][0] if self._events else None

    def finished(self, req: SimRequest, seen_s: float) -> None:
        self.outcomes[req.key].req = req
        self._push(seen_s, _END, req.key)

    def rejected(self, arrival: Arrival, at_s: float) -> None:
        self._push(at_s, _END, arrival.key)

    def _push(self, at_s: float, kind: int, index: int) -> None:
        heapq.heappush(self._events, (at_s, self._seq, kind, index))
        self._seq += 1

    def _due(self, index: int, at_s: float) -> None:
        last = self._plan[index].last_s
        if self._plan[index].after is not None and at_s > self._start_s + (last or float("inf")):
            self._drop(index)
            return
        self.outcomes[index].due_s = at_s
        self._push(at_s + self._timeout_s, _DEADLINE, index)
        if self._free > 0:
            self._send(index, at_s)
        else:
            self._waiting.append(index)

    def _send(self, index: int, at_s: float) -> None:
        self._free -= 1
        self.outcomes[index].sent_s = at_s
        p = self._plan[index]
        self._sent.append(Arrival(at_s, p.prompt, p.max_tokens, p.traffic_class, key=index))

    def _end(self, index: int, at_s: float, error: str | None) -> None:
        outcome = self.outcomes[index]
        if outcome.ended:
            return  # its answer came after the client had cut it off
        outcome.ended, self._open = True, self._open - 1
        if error is not None:
            outcome.error = error
        if outcome.sent_s is not None:
            self._free += 1
            if self._waiting:
                self._send(self._waiting.popleft(), at_s)
        elif index in self._waiting:  # its time ran out in the queue for a slot
            self._waiting.remove(index)
        follower = self._next.get(index)
        if follower is None:
            return
        think_s = self._plan[follower].think_s
        if outcome.req is not None and outcome.error is None:
            self._push(at_s + think_s, _DUE, follower)
        else:
            self._abandon(follower, at_s + think_s, index)

    def _drop(self, index: int | None) -> None:
        """The rest of a session past the point's span."""
        while index is not None:
            outcome = self.outcomes[index]
            outcome.ended = outcome.dropped = True
            self._open -= 1
            index = self._next.get(index)

    def _abandon(self, index: int, at_s: float, failed: int) -> None:
        """A session whose request ``failed`` did not end well sends nothing more."""
        while True:
            last = self._plan[index].last_s
            if last is not None and at_s > self._start_s + last:
                self._drop(index)
                return
            outcome = self.outcomes[index]
            outcome.due_s, outcome.ended = at_s, True
            outcome.error = f"not sent: request {failed} of its session failed"
            self._open -= 1
            follower = self._next.get(index)
            if follower is None:
                return
            at_s += self._plan[follower].think_s
            index = follower
