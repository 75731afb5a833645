"""Find the highest offered rate that still passes a test (the SLO capacity), by bracketing.

Pure: the caller supplies ``passes(rate)``, which runs a load point however it likes. Latency
is monotone in offered load only up to noise, so the search brackets once (doubling or halving
from the start rate) and then bisects to a relative tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Capacity:
    """The bracket found: ``passing_rps`` passed, ``failing_rps`` failed (None: never failed)."""

    passing_rps: float
    failing_rps: float | None
    tried: tuple[tuple[float, bool], ...] = field(default=())


def find_capacity(
    passes: Callable[[float], bool],
    start_rps: float,
    *,
    rel_tol: float = 0.05,
    max_rps: float = 1e4,
    min_rps: float = 1e-3,
) -> Capacity:
    """Bracket and bisect; ``passing_rps`` is 0 when even ``min_rps`` fails."""
    tried: list[tuple[float, bool]] = []

    def check(rate: float) -> bool:
        ok = passes(rate)
        tried.append((rate, ok))
        return ok

    if check(start_rps):
        low, high = _bracket_up(check, start_rps, max_rps)
    else:
        low, high = _bracket_down(check, start_rps, min_rps)
    if high is None or low == 0.0:
        return Capacity(low, high, tuple(tried))
    while high - low > rel_tol * low:
        mid = (low + high) / 2
        if check(mid):
            low = mid
        else:
            high = mid
    return Capacity(low, high, tuple(tried))


def _bracket_up(
    check: Callable[[float], bool], passing: float, max_rps: float
) -> tuple[float, float | None]:
    rate = passing
    while rate < max_rps:
        rate = min(rate * 2, max_rps)
        if not check(rate):
            return passing, rate
        passing = rate
    return passing, None


def _bracket_down(
    check: Callable[[float], bool], failing: float, min_rps: float
) -> tuple[float, float | None]:
    rate = failing
    while rate > min_rps:
        rate /= 2
        if check(rate):
            return rate, failing
        failing = rate
    return 0.0, failing
