"""Sweeps: which rates to measure on a running server, and the SLO capacity they give.

- ``knee_search``: for a configuration whose knee is unknown, a geometric ramp from a start
  rate until the SLO fails, then bisection to a relative tolerance.
- ``screen``: a few rates around an expected knee under a hard time cap: the cheap look a
  candidate gets before anything is spent on it.
- ``validate``: the full range, repeated, with the incumbent and the challenger measured in
  turn at every rate of every repeat so that drift in the machine hits both alike.

A ``Prober`` measures one offered rate for a repeat number (each repeat draws its own requests:
the seed moves with it), over HTTP or on the simulator's virtual clock. Points
the client could not keep up with are recorded but never read as the server's capacity.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import structlog

from kneepoint.load.capacity import interpolate_capacity, mean_interval, slo_margin
from kneepoint.load.knee import find_capacity
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.slo import Slo
from kneepoint.records.sweep import SweepKind, SweepPoint, SweepResult

log = structlog.get_logger(__name__)

Prober = Callable[[float, int], LoadPoint]
"""(offered rate, repeat) -> the measured load point."""

SCREEN_FRACTIONS = (0.7, 0.85, 1.0, 1.1, 1.25)
CLIMB_STEP = 1.2
PLAIN_FAILURE = 1.5
"""An SLO margin this far over the limit leaves no doubt the knee is behind."""
VALIDATE_FRACTIONS = (0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35)


Clock = Callable[[], float]
"""Seconds on whatever clock a time cap counts (wall time, or a target's device time)."""


class _Run:
    """Points measured so far, and the time cap."""

    def __init__(
        self, slo: Slo | None, time_cap_s: float | None, clock: Clock = time.monotonic
    ) -> None:
        self.slo, self.points = slo, list[SweepPoint]()
        self.clock, self.started = clock, clock()
        self.time_cap_s = time_cap_s
        self.capped = False

    def over_time(self) -> bool:
        if self.time_cap_s is not None and self.clock() - self.started >= self.time_cap_s:
            self.capped = True
        return self.capped

    def measure(
        self, probe: Prober, rate: float, repeat: int = 0, arm: str = "incumbent"
    ) -> SweepPoint:
        point = probe(rate, repeat)
        entry = SweepPoint(
            rate_rps=rate, repeat=repeat, arm=arm, margin=slo_margin(point, self.slo), point=point
        )
        self.points.append(entry)
        log.info("sweep.point", arm=arm, repeat=repeat, rate_rps=round(rate, 3),
                 margin=round(entry.margin, 3), goodput_rps=round(point.goodput_rps, 3),
                 valid=point.valid)  # fmt: skip
        return entry

    def result(self, kind: SweepKind, config: EngineConfig, arm: str = "incumbent") -> SweepResult:
        mine = [p for p in self.points if p.arm == arm]
        valid = [p for p in mine if p.point.valid]
        by_repeat = []
        for repeat in sorted({p.repeat for p in valid}):
            margins = [(p.rate_rps, p.margin) for p in valid if p.repeat == repeat]
            capacity = interpolate_capacity(margins)
            by_repeat.append(capacity if capacity is not None else 0.0)
        passing = [p.rate_rps for p in valid if p.margin <= 1.0]
        mean = low = high = None
        if by_repeat and any(by_repeat):
            mean, low, high = mean_interval(by_repeat)
        return SweepResult(
            kind=kind, config=config, points=tuple(mine), capacity_rps=mean,
            capacity_low_rps=low, capacity_high_rps=high, capacity_by_repeat=tuple(by_repeat),
            knee_rps=max(passing) if passing else None,
            invalid_points=len(mine) - len(valid), capped=self.capped,
            elapsed_s=self.clock() - self.started,
        )  # fmt: skip


def knee_search(
    probe: Prober,
    config: EngineConfig,
    slo: Slo | None,
    start_rps: float,
    *,
    rel_tol: float = 0.05,
    max_rps: float = 1e4,
    time_cap_s: float | None = None,
    clock: Clock = time.monotonic,
) -> SweepResult:
    run = _Run(slo, time_cap_s, clock)

    def passes(rate: float) -> bool:
        if run.over_time():
            return False  # stop climbing; the result says it was capped
        entry = run.measure(probe, rate)
        return entry.point.valid and entry.margin <= 1.0

    # Below a 64th of the start rate a point of min_requests takes hours of device time, and
    # an SLO missed by one request at a time is not a capacity to search for.
    find_capacity(passes, start_rps, rel_tol=rel_tol, max_rps=max_rps, min_rps=start_rps / 64)
    return run.result("knee", config)


def screen(
    probe: Prober,
    config: EngineConfig,
    slo: Slo | None,
    around_rps: float,
    *,
    fractions: Sequence[float] = SCREEN_FRACTIONS,
    time_cap_s: float = 120.0,
    clock: Clock = time.monotonic,
) -> SweepResult:
    """Does a challenger beat the incumbent whose knee is ``around_rps``? Measured first at
    that knee; if it holds there, at the higher rates (in turn, until one fails), else at the
    lower ones (down, until one holds): the few points that answer the question and bracket
    the challenger's own knee, under a hard time cap."""
    run = _Run(slo, time_cap_s, clock)
    ladder = sorted(fractions)
    first = min(range(len(ladder)), key=lambda i: abs(ladder[i] - 1.0))
    entry = None if run.over_time() else run.measure(probe, around_rps * ladder[first])
    if entry is not None:
        holds = entry.point.valid and entry.margin <= 1.0
        onward = ladder[first + 1 :] if holds else ladder[:first][::-1]
        for fraction in onward:
            if run.over_time():
                break
            entry = run.measure(probe, around_rps * fraction)
            if (entry.point.valid and entry.margin <= 1.0) != holds:
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
) -> SweepResult:
    """The rates, lowest first, as repeat ``repeat`` of ``arm``: one leg of a validation.
    Rates past the knee stop once it is plain (two failures in a row, or one by half again
    the limit): the capacity reads off the first failure, and points deep in overload cost
    the most device time and say the least. When every rate met the SLO the knee lies above
    them all: up to ``climb`` more rates, each a fifth above the last, until one fails (else
    the capacity is only a lower bound)."""
    run, failed = _Run(slo, None), 0
    for rate in sorted(rates):
        entry = run.measure(probe, rate, repeat, arm)
        failed = failed + 1 if entry.point.valid and entry.margin > 1.0 else 0
        if failed >= 2 or (failed and entry.margin >= PLAIN_FAILURE):
            break
    rate = max(rates, default=0.0)
    for _ in range(climb):
        if any(p.margin > 1.0 and p.point.valid for p in run.points):
            break
        rate *= CLIMB_STEP
        run.measure(probe, rate, repeat, arm)
    return run.result(kind, config, arm)


def merge(results: Sequence[SweepResult], kind: SweepKind = "validate") -> SweepResult:
    """One configuration's legs (repeats measured apart) as one result, its capacity read per
    repeat and summarised with its interval."""
    run = _Run(None, None)
    run.points = [p for r in results for p in r.points]
    arm = run.points[0].arm if run.points else "incumbent"
    merged = run.result(kind, results[0].config, arm)
    elapsed = sum(r.elapsed_s for r in results)
    retried = tuple(cause for r in results for cause in r.retried)
    update = {"elapsed_s": elapsed, "capped": any(r.capped for r in results), "retried": retried}
    return merged.model_copy(update=update)


def validation_rates(
    *knees_rps: float, fractions: Sequence[float] = VALIDATE_FRACTIONS
) -> list[float]:
    """The full range around each knee given (the incumbent's and the challenger's), merged:
    rates within 3% of one another are measured once."""
    rates: list[float] = []
    for rate in sorted(k * f for k in knees_rps if k > 0 for f in fractions):
        if not rates or rate > rates[-1] * 1.03:
            rates.append(rate)
    return rates
