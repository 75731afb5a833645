"""A burst check: the operating rate, a step up to a multiple of it, then back; and how long
TTFT takes to come back within the SLO once the burst ends. Pure: the plan to send and the
reading of what came back.

The plan is three stretches of the workload's own requests (each drawn at its own rate and
seed, re-numbered and laid end to end). The reading cuts the requests into windows by their
scheduled time, each long enough for its TTFT percentiles to rest on about 100 requests (at
least 5 s), overlapping by half; a window's margin is the worst of each class's TTFT
percentiles over its limit. Recovery is the time from the burst's end to the first window
from which every later window is within the limits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from kneepoint.load.plan import PlannedRequest, plan_requests
from kneepoint.load.scoring import metric_values, percentile
from kneepoint.records import BurstWindow, RequestRecord, Slo, TraceEntry, Workload

WINDOW_MIN_S = 5.0
WINDOW_REQUESTS = 100
"""Requests a window aims at: a p99 from fewer is the window's maximum."""


@dataclasses.dataclass(frozen=True, slots=True)
class BurstPlan:
    requests: list[PlannedRequest]
    burst_start_s: float
    burst_end_s: float


def burst_plan(
    workload: Workload,
    operating_rps: float,
    factor: float,
    *,
    settle_s: float,
    burst_s: float,
    after_s: float,
    vocab_size: int,
    seed: int,
    trace: Sequence[TraceEntry] = (),
) -> BurstPlan:
    """``settle_s`` at the operating rate, ``burst_s`` at ``factor`` times it, ``after_s``
    back at the operating rate (``trace``: a trace workload's entries, each stretch replaying
    it from its start, time-scaled to its rate)."""
    stretches = (
        (operating_rps, settle_s),
        (operating_rps * factor, burst_s),
        (operating_rps, after_s),
    )
    requests: list[PlannedRequest] = []
    start = 0.0
    for i, (rate, seconds) in enumerate(stretches):
        count = max(1, round(rate * seconds))
        drawn = plan_requests(
            workload,
            rate,
            num_requests=count,
            seed=seed + i,
            vocab_size=vocab_size,
            salt=f"burst{i}/",
            trace=trace,
        )
        offset = len(requests)
        for planned in drawn:
            after = None if planned.after is None else planned.after + offset
            last = None if planned.last_s is None else start + planned.last_s
            requests.append(
                dataclasses.replace(
                    planned,
                    index=len(requests),
                    at_s=start + planned.at_s,
                    after=after,
                    last_s=last,
                )
            )
        start += seconds
    return BurstPlan(requests, settle_s, settle_s + burst_s)


def ttft_limits(slo: Slo | None, classes: Sequence[str]) -> dict[str, dict[int, float]]:
    """Each class's TTFT limits by percentile (classes without one left out)."""
    found: dict[str, dict[int, float]] = {}
    for name in classes:
        limits = slo.for_class(name) if slo is not None else None
        ttft = {
            pct: limit
            for (metric, pct), limit in (limits.limits_ms() if limits else {}).items()
            if metric == "ttft"
        }
        if ttft:
            found[name] = ttft
    return found


def window_s(rate_rps: float) -> float:
    """A window's length at ``rate_rps``: about ``WINDOW_REQUESTS`` requests, at least 5 s."""
    return max(WINDOW_MIN_S, WINDOW_REQUESTS / rate_rps)


def windows(
    records: Sequence[RequestRecord],
    limits: dict[str, dict[int, float]],
    rate_rps: float,
    burst_end_s: float,
) -> list[BurstWindow]:
    """The TTFT margin over time, in half-overlapping windows of scheduled time."""
    if not records:
        return []
    width = window_s(rate_rps)
    first, last = min(r.scheduled_s for r in records), max(r.scheduled_s for r in records)
    found, start = [], first
    while start + width <= last + 1e-9:
        inside = [r for r in records if start <= r.scheduled_s < start + width]
        found.append(
            BurstWindow(
                start_s=start - burst_end_s,
                requests=len(inside),
                ttft_margin=_margin(inside, limits),
            )
        )
        start += width / 2
    return found


def _margin(records: Sequence[RequestRecord], limits: dict[str, dict[int, float]]) -> float:
    worst = 0.0
    for name, by_pct in limits.items():
        values = metric_values([r for r in records if r.traffic_class == name], "ttft")
        for pct, limit in by_pct.items():
            if values:
                worst = max(worst, percentile(values, pct) / limit)
    return worst


def recovery_s(found: Sequence[BurstWindow]) -> float | None:
    """From the burst's end to the first window after it from which every later window is
    within the limits; None where the last window still misses."""
    after = [w for w in found if w.start_s >= 0.0]
    if not after or not after[-1].ttft_margin <= 1.0 or math.isnan(after[-1].ttft_margin):
        return None
    recovered = after[-1].start_s
    for window in reversed(after):
        if window.ttft_margin > 1.0:
            break
        recovered = window.start_s
    return recovered
