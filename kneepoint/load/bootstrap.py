"""Bootstrap intervals for latency percentiles, resampling requests, not samples.

A request's inter-token gaps share its batch neighbours and its place in the queue, so they
are not independent draws: resampling single gaps would make an ITL percentile look far
surer than it is. Each resample draws the window's requests with replacement (a cluster
bootstrap) and pools the values of those drawn; a percentile shown as the mean over repeats
gets its interval from the mean of one resample per repeat, each repeat drawn on its own.

Resampled percentiles use the nearest rank (the least value with at least ``pct`` percent of
the weight at or below it): with requests as weights, numpy's linear interpolation has no
meaning. Failed requests carry an infinite value, as in the point estimate, so an interval's
upper end may be infinite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

RESAMPLES = 400
"""Resamples per interval: the 2.5th and 97.5th percentiles of 400 rest on 10 each."""
GRID = 1024
"""Candidate values a resampled percentile is read from: the pooled sample's quantiles within
``SPAN`` percentage points of the percentile (finer than the sample itself below ~100,000
values there, and a resample's percentile moves a fraction of a point)."""
SPAN = 8.0

Requests = Sequence[Sequence[float]]
"""Per request, its values of one metric (one TTFT, or every inter-token gap)."""


class _Sample:
    """One repeat's requests as counts at or below each candidate value: a resample's
    weighted share below a candidate is then one matrix product."""

    def __init__(self, requests: Requests, pct: float) -> None:
        kept = [values for values in requests if len(values)]
        self.requests = len(kept)
        if not kept:
            self.grid = np.array([math.nan])
            return
        sizes = np.array([len(v) for v in kept], dtype=np.float64)
        flat = np.concatenate([np.asarray(v, dtype=np.float64) for v in kept])
        owners = np.repeat(np.arange(self.requests), sizes.astype(np.int64))
        finite = np.sort(flat[np.isfinite(flat)])
        low, high = max(0.0, pct - SPAN), min(100.0, pct + SPAN)
        grid = np.quantile(finite, np.linspace(low, high, GRID) / 100.0) if finite.size else []
        self.grid = np.unique(np.append(grid, np.inf))
        below = np.searchsorted(self.grid, flat, side="left")  # value <= grid[k] for k >= it
        width = self.grid.size + 1
        counts = np.bincount(owners * width + below, minlength=self.requests * width)
        counts = counts.reshape(self.requests, width).astype(np.float64)
        self.at_or_below = np.cumsum(counts, axis=1)[:, : self.grid.size]
        self.sizes = sizes

    def resampled(
        self, pct: float, resamples: int, rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """The percentile in each of ``resamples`` draws of the requests."""
        if not self.requests:
            return np.full(resamples, math.nan)
        n = self.requests
        drawn = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)
        share = (drawn @ self.at_or_below) / (drawn @ self.sizes)[:, None]
        # the least candidate holding pct of the weight (the grid's first where even its
        # lowest candidate does: a resample that far off is clamped to the grid's edge)
        rank = np.argmax(share >= pct / 100.0 - 1e-12, axis=1)
        return np.asarray(self.grid[rank], dtype=np.float64)


def mean_percentile_interval(
    repeats: Sequence[Requests],
    pct: float,
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The ``confidence`` interval of the mean over repeats of each repeat's ``pct``
    percentile; (nan, nan) where no repeat has a value."""
    rng = np.random.default_rng(seed)
    samples = [_Sample(r, pct) for r in repeats if any(len(v) for v in r)]
    if not samples:
        return math.nan, math.nan
    drawn = np.vstack([s.resampled(pct, resamples, rng) for s in samples])
    with np.errstate(invalid="ignore"):  # inf - inf where a repeat failed in every draw
        means = np.nanmean(drawn, axis=0) if not np.isnan(drawn).all() else drawn[0]
    tail = (1.0 - confidence) / 2.0
    finite = np.sort(means[~np.isnan(means)])
    if not finite.size:
        return math.nan, math.nan
    low = finite[min(finite.size - 1, math.floor(tail * finite.size))]
    high = finite[min(finite.size - 1, math.ceil((1.0 - tail) * finite.size) - 1)]
    return float(low), float(high)
