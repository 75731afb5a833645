"""What sends requests to the simulated engine: arrivals at planned times, or a client that
waits on answers (a session's next turn, a capped client's next request).

The engine asks its client for the arrivals due by now, and when it has nothing to run, for
the time of the next; it tells the client when each request ended, as the client saw it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kneepoint.sim.request import SimRequest


class RequestRejectedError(ValueError):
    """A request the engine refuses at the door (as vLLM answers HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request to submit at a virtual time."""

    at_s: float
    prompt: tuple[int, ...]
    max_tokens: int
    traffic_class: str = ""
    key: int = -1
    """The client's name for it (a plan's index), carried to its ``SimRequest``."""


class Client:
    """The engine's side of a client: what it sends when, and what it hears back."""

    @property
    def done(self) -> bool:
        """Nothing left to send nor wait for: the engine may stop."""
        return False

    def take(self, now_s: float) -> list[Arrival]:
        """The arrivals due by ``now_s``, in time order (each handed out once)."""
        raise NotImplementedError

    def next_at(self) -> float | None:
        """When the next arrival is due, if one is known."""
        raise NotImplementedError

    def finished(self, req: SimRequest, seen_s: float) -> None:
        """``req`` ended; the client saw its last token at ``seen_s``."""

    def rejected(self, arrival: Arrival, at_s: float) -> None:
        """The engine refused ``arrival`` at ``at_s``."""


class Scheduled(Client):
    """Open loop: every arrival at its own time, whatever happened to the others."""

    def __init__(self, arrivals: Iterable[Arrival]) -> None:
        self._pending = sorted(arrivals, key=lambda a: a.at_s)
        self._index = 0

    def take(self, now_s: float) -> list[Arrival]:
        pending, start = self._pending, self._index
        index = start
        while index < len(pending) and pending[index].at_s <= now_s:
            index += 1
        self._index = index
        return pending[start:index]

    def next_at(self) -> float | None:
        return self._pending[self._index].at_s if self._index < len(self._pending) else None
