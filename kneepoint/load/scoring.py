"""Score the requests of one load point: latency distributions per class, SLO, goodput.

Only the stable window counts: requests scheduled after the warm-up and before the drain
(the first and last ``trim`` fraction of the scheduled span). Failed and timed-out requests
count as infinitely slow, so they count against the percentiles and against goodput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import numpy.typing as npt

from kneepoint.records import METRICS, Dist, GoodputRule, RequestRecord, Slo

FloatArray = npt.NDArray[np.float64]


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default); nan for no values."""
    return _from_sorted(sorted(values), pct)


def _from_sorted(ordered: Sequence[float] | FloatArray, pct: float) -> float:
    if not len(ordered):
        return math.nan
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    if ordered[high] == math.inf:
        return math.inf if rank > low or ordered[low] == math.inf else float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def summarize(values: Sequence[float] | FloatArray) -> Dist:
    # numpy sorts a load point's pooled gaps (a quarter million at the quickstart's knee)
    # several times faster. The mean sums the sorted values one after another, as Python's
    # ``sum`` did, so it is the same number to the last bit: a cumulative sum runs in order
    # (numpy's ``cumsum`` notes its last value may differ from ``sum``'s pairwise one), and
    # without a quarter million Python floats made for it. (``sum`` starts from 0: the two
    # differ only on a sum of negative zeros, which no latency is.)
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    count = len(ordered)
    finite = bool(np.isfinite(ordered).all())
    mean = float(np.cumsum(ordered)[-1]) / count if finite and count else math.inf
    return Dist(
        count=count,
        mean_ms=mean if count else math.nan,
        p50_ms=_from_sorted(ordered, 50),
        p90_ms=_from_sorted(ordered, 90),
        p95_ms=_from_sorted(ordered, 95),
        p99_ms=_from_sorted(ordered, 99),
    )


def stable_window(
    records: Sequence[RequestRecord], trim: float = 0.1, warmup_s: float = 0.0
) -> list[RequestRecord]:
    """The requests scheduled inside the middle of the run: ``trim`` of the scheduled span cut
    at each end, and at the start at least ``warmup_s`` (the time the server takes to fill up
    to steady state, about one request's length), while that leaves half the span."""
    if not records:
        return []
    first = min(r.scheduled_s for r in records)
    last = max(r.scheduled_s for r in records)
    span = last - first
    low = first + max(span * trim, min(warmup_s, span / 2))
    high = last - span * trim
    return [r for r in records if low <= r.scheduled_s <= high]


def metric_values(records: Sequence[RequestRecord], metric: str) -> list[float]:
    """Every value of one metric over the records (ITL pools all gaps; failures are inf)."""
    values: list[float] = []
    for rec in records:
        if metric == "itl":
            values += rec.itls_ms() if rec.ok else [math.inf]
        elif metric == "tpot":
            tpot = rec.tpot_ms
            if tpot is not None:
                values.append(tpot)
        else:
            values.append(rec.ttft_ms if metric == "ttft" else rec.e2e_ms)
    return values


def _itl_arrays(recs: Sequence[RequestRecord]) -> list[FloatArray]:
    """Each request's gaps between chunks in ms (``itls_ms``'s numbers, as arrays); a failed
    request's one gap is infinite. The chunks of all go into one array and one difference
    (a window holds ~10^5), each request's gaps a slice of it: the same subtractions, without
    an array made per request."""
    ok = [r.chunk_times_s for r in recs if r.ok]
    times = np.fromiter(chain.from_iterable(ok), dtype=np.float64)
    gaps = np.diff(times) * 1000.0  # the gap across two requests' chunks is sliced off
    arrays: list[FloatArray] = []
    start = 0
    for rec in recs:
        if not rec.ok:
            arrays.append(_FAILED_ITLS)
            continue
        count = len(rec.chunk_times_s)
        arrays.append(gaps[start : start + max(count - 1, 0)])
        start += count
    return arrays


_FAILED_ITLS = np.array([math.inf])


def _is_good(
    rec: RequestRecord,
    limits: dict[tuple[str, int], float],
    itls: FloatArray,
    rule: GoodputRule = "every_limit",
) -> bool:
    """Whether the request met the limits of its class by ``rule`` (``Slo.goodput_rule``):
    its own ITL percentiles included, given its gaps (``_itl_arrays``); or, as vLLM's bench
    counts, its mean time per output token held against a gap limit."""
    if not rec.ok:
        return False
    for (metric, pct), limit in limits.items():
        if metric == "itl" and rule == "vllm":
            value = rec.tpot_ms
        elif metric == "itl":
            value = _from_sorted(np.sort(itls), pct) if len(itls) else None
        else:
            value = (
                rec.tpot_ms
                if metric == "tpot"
                else (rec.ttft_ms if metric == "ttft" else rec.e2e_ms)
            )
        if value is not None and value > limit:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Score:
    """One load point's verdict over its stable window."""

    dists: dict[str, dict[str, Dist]]
    """Per class, per metric (ttft, itl, tpot, e2e)."""
    meets_slo: bool
    violations: tuple[str, ...]
    """E.g. ``chat ttft_p99 1523 ms > 1000 ms``."""
    good: int
    total: int
    failed: int
    window_s: float
    good_by_class: dict[str, int]
    """Good requests of each class in the window."""
    total_by_class: dict[str, int]

    @property
    def good_share(self) -> float:
        """Share of the window's requests that were good (0 for an empty window)."""
        return self.good / self.total if self.total else 0.0


def shown_over(value: float, limit: float) -> str:
    """``value``, a miss of ``limit``, in as few decimals (up to 3) as show it above the limit:
    50.4 against 50 reads "50.4", not "50" (which would say "itl_p95 50 ms > 50 ms")."""
    for decimals in range(4):
        shown = f"{value:.{decimals}f}"
        if float(shown) > limit:
            return shown
    return f"{value:.3f}"


def score(
    records: Sequence[RequestRecord], slo: Slo | None, trim: float = 0.1, warmup_s: float = 0.0
) -> Score:
    """Percentiles per class over the stable window, and whether every class met its SLO."""
    window = stable_window(records, trim, warmup_s)
    by_class: dict[str, list[RequestRecord]] = {}
    for rec in window:
        by_class.setdefault(rec.traffic_class, []).append(rec)
    dists: dict[str, dict[str, Dist]] = {}
    violations: list[str] = []
    good_by_class: dict[str, int] = {}
    for name, recs in sorted(by_class.items()):
        itls = _itl_arrays(recs)  # each request's gaps, worked out once
        dists[name] = {
            m: summarize(np.concatenate(itls) if m == "itl" else metric_values(recs, m))
            for m in METRICS
        }
        limits = slo.for_class(name) if slo is not None else None
        limits_ms = limits.limits_ms() if limits else {}
        for (metric, pct), limit in limits_ms.items():
            value = dists[name][metric].at(pct)
            if not value <= limit:  # nan (no values) fails too
                shown = shown_over(value, limit)
                violations.append(f"{name} {metric}_p{pct} {shown} ms > {limit:g} ms")
        pairs = zip(recs, itls, strict=True)
        rule = slo.goodput_rule if slo is not None else "every_limit"
        good_by_class[name] = sum(_is_good(rec, limits_ms, gaps, rule) for rec, gaps in pairs)
    span = (
        (max(r.scheduled_s for r in window) - min(r.scheduled_s for r in window)) if window else 0
    )
    return Score(
        dists=dists,
        meets_slo=bool(window) and not violations,
        violations=tuple(violations),
        good=sum(good_by_class.values()),
        total=len(window),
        good_by_class=good_by_class,
        total_by_class={name: len(recs) for name, recs in sorted(by_class.items())},
        failed=sum(not r.ok for r in window),
        window_s=span,
    )
