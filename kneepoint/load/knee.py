"""Find the highest offered rate that still passes a test (the SLO capacity), by bracketing.

Pure: the caller supplies ``check(rate)``, which runs a load point however it likes and says
what it showed: ``pass``, ``fail``, ``unknown`` (the point could not tell: never read as
either) or ``hopeless`` (a failure that no lower rate can mend: the server missed the SLO
with nothing queued). Latency is monotone in offered load only up to noise, so the search
brackets once (doubling or halving from the start rate) and then bisects to a relative
tolerance.

An unknown point is stepped over: going up, the next rate is tried (a counted failure past
it still brackets the knee), but two unknowns in a row end the climb, and the capacity is
then a floor the host could measure up to; going down, the search goes on below it. An
unknown midpoint ends the bisection with the bracket it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from kneepoint.records import MAX_SEARCH_RPS

Verdict = Literal["pass", "fail", "unknown", "hopeless"]


@dataclass(frozen=True, slots=True)
class Capacity:
    """The bracket found: ``passing_rps`` passed (0: nothing did), ``failing_rps`` failed
    (None: no counted failure above it); ``unknown_rps``: the rate whose unknown points ended
    the climb (None: none did)."""

    passing_rps: float
    failing_rps: float | None
    tried: tuple[tuple[float, Verdict], ...] = field(default=())
    unknown_rps: float | None = None
    hopeless: bool = False


def find_capacity(
    check: Callable[[float], Verdict],
    start_rps: float,
    *,
    rel_tol: float = 0.05,
    max_rps: float = MAX_SEARCH_RPS,
    min_rps: float = 1e-3,
) -> Capacity:
    """Bracket and bisect; ``passing_rps`` is 0 when no rate down to ``min_rps`` passed."""
    search = _Search(check)
    first = search.check(start_rps)
    if first == "pass":
        search.up(start_rps, max_rps)
    elif first == "unknown":
        search.down(start_rps, min_rps)
        if search.passing is not None:
            search.up(search.passing, max_rps)
    elif first == "fail":
        search.down(start_rps, min_rps)
    search.bisect(rel_tol)
    return search.result()


class _Search:
    def __init__(self, check: Callable[[float], Verdict]) -> None:
        self._check = check
        self.tried: list[tuple[float, Verdict]] = []
        self.passing: float | None = None
        self.failing: float | None = None
        self.unknown: float | None = None
        self.hopeless = False

    def check(self, rate: float) -> Verdict:
        """The rate's verdict, measured once: a rate the search comes back to is not
        measured again."""
        for tried, verdict in self.tried:
            if tried == rate:
                return verdict
        verdict = self._check(rate)
        self.tried.append((rate, verdict))
        if verdict == "pass" and (self.passing is None or rate > self.passing):
            self.passing = rate
        elif verdict in ("fail", "hopeless") and (self.failing is None or rate < self.failing):
            self.failing = rate
        self.hopeless = self.hopeless or verdict == "hopeless"
        return verdict

    def up(self, rate: float, max_rps: float) -> None:
        """Double from a passing ``rate`` until a counted failure, or two unknowns in a row."""
        unknowns = 0
        while rate < max_rps:
            rate = min(rate * 2, max_rps)
            verdict = self.check(rate)
            if verdict in ("fail", "hopeless"):
                return
            unknowns = unknowns + 1 if verdict == "unknown" else 0
            if unknowns == 2:
                self.unknown = rate / 2
                return

    def down(self, rate: float, min_rps: float) -> None:
        """Halve until a pass, a hopeless failure, or ``min_rps``."""
        while rate / 2 >= min_rps * (1 - 1e-9):
            rate /= 2
            verdict = self.check(rate)
            if verdict in ("pass", "hopeless"):
                return

    def bisect(self, rel_tol: float) -> None:
        low, high = self.passing, self.failing
        if low is None or high is None or high <= low:
            return
        while high - low > rel_tol * low:
            mid = (low + high) / 2
            verdict = self.check(mid)
            if verdict == "unknown":
                return
            if verdict == "pass":
                low = mid
            else:
                high = mid

    def result(self) -> Capacity:
        passing = self.passing or 0.0
        above = [r for r, v in self.tried if v in ("fail", "hopeless") and r > passing]
        failing = min(above) if above else None
        return Capacity(passing, failing, tuple(self.tried), self.unknown, self.hopeless)
