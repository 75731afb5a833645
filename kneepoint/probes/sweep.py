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
load) is *unknown*: measured again (``retakes``: longer, on fresh requests, scraped less), and
if still unknown recorded but never counted as a pass or a failure. Every sweep brackets the
knee with counted points only; a capacity with no counted failure above it is a floor, and
the result says why (``SweepResult.floor_reason``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from kneepoint.load.capacity import interpolate_capacity, mean_interval, slo_margin
from kneepoint.load.knee import Verdict, find_capacity
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.slo import Slo
from kneepoint.records.sweep import SweepKind, SweepPoint, SweepResult

log = structlog.get_logger(__name__)


class Prober(Protocol):
    """Measures one offered rate: ``repeat`` picks the requests drawn, ``attempt`` > 0 is a
    retake of a point that could not tell."""

    def __call__(self, rate_rps: float, repeat: int, attempt: int = 0, /) -> LoadPoint: ...


SCREEN_FRACTIONS = (0.7, 0.85, 1.0, 1.1, 1.25)
CLIMB_STEP = 1.2
PLAIN_FAILURE = 1.5
"""An SLO margin this far over the limit leaves no doubt the knee is behind."""
VALIDATE_FRACTIONS = (0.6, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35)
LOWEST_SHARE = 1 / 16
"""A knee search goes no lower than its start rate times this, unless told a lowest rate:
at a 16th of the start a point of 40 requests already takes minutes of device time."""
NO_BETTER = 0.9
"""Walking down, a miss whose margin shrank by less than this factor from the rate above,
with nothing queued, is the server's unloaded latency: no lower rate will meet the SLO."""


Clock = Callable[[], float]
"""Seconds on whatever clock a time cap counts (wall time, or a target's device time)."""


class _Run:
    """Points measured so far, the time cap, and the retakes a point that cannot tell gets."""

    def __init__(
        self, slo: Slo | None, time_cap_s: float | None, clock: Clock = time.monotonic,
        retakes: int = 1,
    ) -> None:  # fmt: skip
        self.slo, self.points = slo, list[SweepPoint]()
        self.clock, self.started = clock, clock()
        self.time_cap_s, self.retakes = time_cap_s, retakes
        self.capped = False

    def over_time(self) -> bool:
        if self.time_cap_s is not None and self.clock() - self.started >= self.time_cap_s:
            self.capped = True
        return self.capped

    def measure(
        self, probe: Prober, rate: float, repeat: int = 0, arm: str = "incumbent"
    ) -> SweepPoint:
        """The rate measured, and measured again while it cannot tell (up to ``retakes``
        times, within the time cap): the last attempt."""
        entry = self._once(probe, rate, repeat, arm, 0)
        for attempt in range(1, self.retakes + 1):
            if entry.point.valid or self.over_time():
                break
            log.info("sweep.retake", rate_rps=round(rate, 3), attempt=attempt,
                     why=entry.point.invalid_reason())  # fmt: skip
            entry = self._once(probe, rate, repeat, arm, attempt)
        return entry

    def _once(self, probe: Prober, rate: float, repeat: int, arm: str, attempt: int) -> SweepPoint:
        point = probe(rate, repeat, attempt)
        entry = SweepPoint(rate_rps=rate, repeat=repeat, arm=arm, attempt=attempt,
                           margin=slo_margin(point, self.slo), point=point)  # fmt: skip
        self.points.append(entry)
        log.info("sweep.point", arm=arm, repeat=repeat, rate_rps=round(rate, 3),
                 margin=round(entry.margin, 3), goodput_rps=round(point.goodput_rps, 3),
                 counted=point.valid, attempt=attempt)  # fmt: skip
        return entry

    def result(self, kind: SweepKind, config: EngineConfig, arm: str = "incumbent") -> SweepResult:
        mine = [p for p in self.points if p.arm == arm]
        counted = [p for p in mine if p.point.valid]
        by_repeat, floors = [], []
        for repeat in sorted({p.repeat for p in counted}):
            margins = [(p.rate_rps, p.margin) for p in counted if p.repeat == repeat]
            capacity = interpolate_capacity(margins)
            by_repeat.append(capacity if capacity is not None else 0.0)
            floors.append(floor_reason([p for p in mine if p.repeat == repeat], self.capped))
        passing = [p.rate_rps for p in counted if p.margin <= 1.0]
        mean = low = high = None
        if by_repeat and any(by_repeat):
            mean, low, high = mean_interval(by_repeat)
        return SweepResult(
            kind=kind, config=config, points=tuple(mine), capacity_rps=mean,
            capacity_low_rps=max(0.0, low) if low is not None else None,
            capacity_high_rps=high, capacity_by_repeat=tuple(by_repeat),
            knee_rps=max(passing) if passing else None,
            invalid_points=len(mine) - len(counted), capped=self.capped,
            floor_reason=next((f for f in floors if f is not None), None),
            elapsed_s=self.clock() - self.started,
        )  # fmt: skip


def floor_reason(points: Sequence[SweepPoint], capped: bool) -> str | None:
    """Why the capacity these points give (one repeat's) is only a floor: no counted failure
    above the highest counted pass. None where one bounds it, or nothing passed."""
    passes = [p.rate_rps for p in points if p.passed]
    if not passes:
        return None
    top = max(passes)
    if any(p.failed and p.rate_rps > top for p in points):
        return None
    unknown = sorted((p for p in points if not p.point.valid and p.rate_rps > top),
                     key=lambda p: p.rate_rps)  # fmt: skip
    if unknown:
        why = unknown[0].point.invalid_reason() or "it could not tell"
        return (f"the host cannot measure this server above {top:.2f} req/s: at "
                f"{unknown[0].rate_rps:.2f} req/s, {why}")  # fmt: skip
    if capped:
        return f"the time cap ended the sweep at {top:.2f} req/s before any rate failed"
    return f"no rate tried failed the SLO (the highest, {top:.2f} req/s, met it)"


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
    retakes: int = 1,
    lowest_rps: float | None = None,
) -> SweepResult:
    """Ramp, bracket and bisect with counted points (``kneepoint.load.knee``), from
    ``start_rps`` down to ``lowest_rps`` at most (a 16th of the start by default)."""
    run = _Run(slo, time_cap_s, clock, retakes)

    def check(rate: float) -> Verdict:
        if run.over_time():
            return "unknown"  # measures nothing: the result says the cap ended it
        entry = run.measure(probe, rate)
        if not entry.point.valid:
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
    run = _Run(slo, time_cap_s, clock, retakes)
    ladder = sorted(fractions)
    first = min(range(len(ladder)), key=lambda i: abs(ladder[i] - 1.0))
    holds: bool | None = None
    order, rest = [ladder[first], *ladder[:first][::-1]], list[float]()
    for i, fraction in enumerate(order):
        if run.over_time():
            break
        entry = run.measure(probe, around_rps * fraction)
        if entry.point.valid:
            holds = entry.passed
            # holding at the knee: climb; missing: down until one holds; holding only
            # below a knee that could not tell: that floor is what the host can say
            rest = ladder[first + 1 :] if holds and i == 0 else [] if holds else order[i + 1 :]
            break
    for fraction in rest:
        if run.over_time():
            break
        entry = run.measure(probe, around_rps * fraction)
        if entry.point.valid and entry.passed != holds:
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
    retakes: int = 1,
) -> SweepResult:
    """The rates, lowest first, as repeat ``repeat`` of ``arm``: one leg of a validation.
    Rates past the knee stop once it is plain (two failures in a row, or one by half again
    the limit): the capacity reads off the first failure, and points deep in overload cost
    the most device time and say the least. When every rate met the SLO the knee lies above
    them all: up to ``climb`` more rates, each a fifth above the last, until one fails (else
    the capacity is only a lower bound)."""
    run, failed = _Run(slo, None, retakes=retakes), 0
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
    return run.result(kind, config, arm)


def merge(results: Sequence[SweepResult], kind: SweepKind = "validate") -> SweepResult:
    """One configuration's legs (repeats measured apart) as one result, its capacity read per
    repeat and summarised with its interval."""
    run = _Run(None, None)
    run.points = [p for r in results for p in r.points]
    run.capped = any(r.capped for r in results)
    arm = run.points[0].arm if run.points else "incumbent"
    merged = run.result(kind, results[0].config, arm)
    elapsed = sum(r.elapsed_s for r in results)
    retried = tuple(cause for r in results for cause in r.retried)
    update = {"elapsed_s": elapsed, "retried": retried}
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
