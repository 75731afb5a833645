"""Sweeps: which rates to measure on a running server, and the SLO capacity they give.

- ``knee_search``: for a configuration whose knee is unknown, a geometric ramp from a start
  rate until the SLO fails, then bisection to a relative tolerance.
- ``screen``: a few rates around an expected knee under a hard time cap: the cheap look a
  candidate gets before anything is spent on it.
- ``validate``: the full range, repeated, with the incumbent and the challenger measured in
  turn at every rate of every repeat so that drift in the machine hits both alike.

A ``Prober`` measures one offered rate for a repeat number (each repeat draws its own requests:
the seed moves with it), over HTTP or on the simulator's virtual clock. A point that cannot tell
(``LoadPoint.valid`` false: a client that fell behind, a server whose counts describe another
load) is *unknown*: measured again (``retakes``: on fresh requests, scraped less), and
if still unknown recorded but never counted as a pass or a failure. Every sweep brackets the
knee with counted points only; a capacity with no counted failure above it is a floor, and
the result says why (``SweepResult.floor_reason``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog

from kneepoint.load import Verdict, find_capacity
from kneepoint.measure.sweep_run import Clock, SweepRun
from kneepoint.probes.backends import Prober
from kneepoint.records import MAX_SEARCH_RPS, EngineConfig, Slo, SweepKind, SweepPoint, SweepResult

log = structlog.get_logger(__name__)


SCREEN_FRACTIONS = (0.7, 0.85, 1.0, 1.1, 1.25)
CLIMB_STEP = 1.2
PLAIN_FAILURE = 1.5
"""An SLO margin this far over the limit leaves no doubt the knee is behind."""
LOWEST_SHARE = 1 / 16
"""A knee search goes no lower than its start rate times this, unless told a lowest rate:
at a 16th of the start a point of 40 requests already takes minutes of device time."""
NO_BETTER = 0.9
"""Walking down, a miss whose margin shrank by less than this factor from the rate above,
with nothing queued, is the server's unloaded latency: no lower rate will meet the SLO."""


def knee_search(
    probe: Prober,
    config: EngineConfig,
    slo: Slo | None,
    start_rps: float,
    *,
    rel_tol: float = 0.05,
    max_rps: float = MAX_SEARCH_RPS,
    time_cap_s: float | None = None,
    clock: Clock = time.monotonic,
    retakes: int = 1,
    lowest_rps: float | None = None,
    passing_rps: float = 0.0,
) -> SweepResult:
    """Ramp, bracket and bisect with counted points (``kneepoint.load.knee``), from
    ``start_rps`` down to ``lowest_rps`` at most (a 16th of the start by default). Rates at
    or below ``passing_rps`` are known to pass (measured already, by the caller) and are not
    measured again."""
    run = SweepRun(slo, time_cap_s, clock, retakes)

    def check(rate: float) -> Verdict:
        if rate <= passing_rps:
            return "pass"
        if run.over_time():
            return "unknown"  # measures nothing: the result says the cap ended it
        entry = run.measure(probe, rate)
        if not entry.counted:
            return "unknown"
        if entry.passed:
            return "pass"
        return "hopeless" if _no_lower_rate_helps(entry, run.points) else "fail"

    lowest = lowest_rps if lowest_rps is not None else start_rps * LOWEST_SHARE
    find_capacity(check, start_rps, rel_tol=rel_tol, max_rps=max_rps, min_rps=lowest)
    return run.result("knee", config)


def _no_lower_rate_helps(entry: SweepPoint, points: Sequence[SweepPoint]) -> bool:
    """A miss with nothing queued whose margin is no better than the miss at the next rate
    above it: the server's unloaded latency is over the limit."""
    waiting = entry.point.signals.waiting_mean
    if waiting is None or waiting >= 1.0:
        return False
    above = [p for p in points if p.failed and p.rate_rps > entry.rate_rps]
    if not above:
        return False
    nearest = min(above, key=lambda p: p.rate_rps)
    return entry.margin >= NO_BETTER * nearest.margin


def screen(
    probe: Prober,
    config: EngineConfig,
    slo: Slo | None,
    around_rps: float,
    *,
    fractions: Sequence[float] = SCREEN_FRACTIONS,
    time_cap_s: float = 120.0,
    clock: Clock = time.monotonic,
    retakes: int = 1,
) -> SweepResult:
    """Does a challenger beat the incumbent whose knee is ``around_rps``? Measured first at
    that knee; if it holds there, at the higher rates (in turn, until one fails), else at the
    lower ones (down, until one holds): the few counted points that answer the question and
    bracket the challenger's own knee, under a hard time cap. A point that cannot tell is
    stepped over; where the knee itself cannot tell, the rates below it are tried."""
    run = SweepRun(slo, time_cap_s, clock, retakes)
    ladder = sorted(fractions)
    first = min(range(len(ladder)), key=lambda i: abs(ladder[i] - 1.0))
    holds: bool | None = None
    order, rest = [ladder[first], *ladder[:first][::-1]], list[float]()
    for i, fraction in enumerate(order):
        if run.over_time():
            break
        entry = run.measure(probe, around_rps * fraction)
        if entry.counted:
            holds = entry.passed
            # holding at the knee: climb; missing: down until one holds; holding only
            # below a knee that could not tell: that floor is what the host can say
            rest = ladder[first + 1 :] if holds and i == 0 else [] if holds else order[i + 1 :]
            break
    for fraction in rest:
        if run.over_time():
            break
        entry = run.measure(probe, around_rps * fraction)
        if entry.counted and entry.passed != holds:
            break  # the knee is bracketed
    return run.result("screen", config)


def measure_rates(
    probe: Prober,
    config: EngineConfig,
    slo: Slo | None,
    rates: Sequence[float],
    *,
    repeat: int = 0,
    arm: str = "incumbent",
    kind: SweepKind = "validate",
    climb: int = 0,
    descend: int = 0,
    retakes: int = 1,
    reference: Sequence[SweepPoint] = (),
) -> SweepResult:
    """The rates, lowest first, as repeat ``repeat`` of ``arm``: one leg of a validation.
    Rates past the knee stop once it is plain (two failures in a row, or one by half again
    the limit): the capacity reads off the first failure, and points deep in overload cost
    the most device time and say the least. When every rate met the SLO the knee lies above
    them all: up to ``climb`` more rates, each a fifth above the last, until one fails (else
    the capacity is only a lower bound). When the lowest rate failed the knee lies below
    them all: up to ``descend`` more rates, each a fifth below the last, until one passes (else
    the repeat reads no capacity). ``reference``: the configuration's points from earlier
    legs, which a point of this one must not contradict without a retake."""
    run, failed = SweepRun(slo, None, retakes=retakes, reference=reference), 0
    for rate in sorted(rates):
        entry = run.measure(probe, rate, repeat, arm)
        failed = failed + 1 if entry.failed else 0
        if failed >= 2 or (failed and entry.margin >= PLAIN_FAILURE):
            break
    rate = max(rates, default=0.0)
    for _ in range(climb):
        if any(p.failed for p in run.points):
            break
        rate *= CLIMB_STEP
        run.measure(probe, rate, repeat, arm)
    rate = min(rates, default=0.0)
    for _ in range(descend):
        if not _lowest_failed(run.points):
            break
        rate /= CLIMB_STEP
        run.measure(probe, rate, repeat, arm)
    return run.result(kind, config, arm)


def _lowest_failed(points: Sequence[SweepPoint]) -> bool:
    """Whether the lowest rate counted failed: a knee below the range, which interpolation
    cannot read (a pass above that failure is taken for noise). On the agentic quickstart
    fp8 KV's ITL p95 broke its limit at 39 req/s and met it at 52-59 (steps carrying a full
    chunk set the tail only at middling loads), and a validation whose range began at 39 read
    every repeat as 0 req/s: -100% against an incumbent at 46 (benchmarks/regret.py)."""
    counted = [p for p in points if p.counted]
    if not counted:
        return False
    lowest = min(p.rate_rps for p in counted)
    return all(p.failed for p in counted if p.rate_rps == lowest)
