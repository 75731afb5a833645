"""SLO capacity from measured load points: interpolated where the SLO margin crosses 1.

A point's margin is its worst observed/limit ratio over every class and limit (> 1 fails,
infinite when a class had no successes), or its backlog's growth over the most it may grow
where that is worse (``kneepoint.load.backlog``); it rises with load. The capacity is where
the margin, interpolated linearly in rate between the highest passing point below the first
failure and that failure, reaches 1. Over repeats, the mean and a Student-t interval say how
sure it is.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from kneepoint.records import LoadPoint, Slo

# Two-sided 95% Student-t quantiles by degrees of freedom (1..10); 1.96 beyond.
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def slo_margin(point: LoadPoint, slo: Slo | None) -> float:
    """Worst observed/limit ratio, the backlog's included (<= 1 meets the SLO); with no SLO,
    0 where every request completed, else infinite."""
    if slo is None:
        return 0.0 if point.failed == 0 else math.inf
    worst = point.backlog.margin if point.backlog is not None else 0.0
    for name, dists in point.dists.items():
        limits = slo.for_class(name)
        for (metric, pct), limit in (limits.limits_ms() if limits else {}).items():
            value = dists[metric].at(pct)
            worst = max(worst, value / limit if not math.isnan(value) else math.inf)
    return worst


def interpolate_capacity(margins: Sequence[tuple[float, float]]) -> float | None:
    """Capacity from (rate, margin) pairs of one sweep; None when no rate passed. When none
    failed, the highest rate tried (a lower bound)."""
    points = sorted(margins)
    passing = [(r, m) for r, m in points if m <= 1.0]
    if not passing:
        return None
    failing = [(r, m) for r, m in points if m > 1.0]
    if not failing:
        return passing[-1][0]
    high_rate, high_margin = failing[0]
    below = [(r, m) for r, m in passing if r < high_rate]
    if not below:
        return None  # the lowest rate failed: a passing point above it is noise
    low_rate, low_margin = below[-1]
    if math.isinf(high_margin):
        return low_rate
    share = (1.0 - low_margin) / (high_margin - low_margin)
    return low_rate + share * (high_rate - low_rate)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval (the mean both ends for a single value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    t = _T95[len(values) - 2] if len(values) - 1 <= len(_T95) else 1.96
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
