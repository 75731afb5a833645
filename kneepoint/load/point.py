"""A load point's records scored into a ``LoadPoint``: latency, goodput, and trust.

A point is ``client_bound`` when the client's own lag behind its schedule (a concurrency cap's
waits taken out) reaches ``lag_limit_ms`` at p99: its latencies would then say as much about
the generator as about the server, so it must not be read as a slow server.

A point is ``inconsistent`` when it met its SLO (a steady state, where Little's law holds)
and the server's own mean concurrency differs by more than ``CONCURRENCY_TOLERANCE`` from
the achieved rate times the mean latency: the server's counts then describe another load
than the client's (another server behind the URL, a window that does not match). Past the
knee the law does not hold over a finite window, because the queue grows: the ratio is kept,
not judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from kneepoint.load.score import Score, percentile, score, stable_window
from kneepoint.records.loadpoint import LoadPoint, Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.records.slo import Slo

DEFAULT_LAG_LIMIT_MS = 10.0
# The client's lag may not exceed this share of the tightest SLO limit: below it, the lag
# cannot move a request across its limit by more than the measurement noise does.
LAG_SHARE_OF_SLO = 0.05
LATE_STEP_SHARE = 0.01
"""A simulator may send at most this share of a point's steps over 5 ms late (its clock lag
p99 under 5 ms): beyond it the host's CPU, not the simulated engine, shapes the latencies."""
CONCURRENCY_TOLERANCE = 2.0
"""How far a steady point's server concurrency may stray from rate x latency. Real H100
recordings (tests/fixtures/real): 0.81-1.03 at every point that met the SLO (the requests
queued in the API server are in the latency but not in vLLM's counts), 0.32-0.76 at the
overloaded points past the knee, where the queue grows through the window."""


def lag_limit_for(slo: Slo | None) -> float:
    """How late the client may run at p99 before a point says more about it than about the
    server: 10 ms, or 5% of the tightest limit a late send moves (TTFT and e2e count from the
    scheduled time; ITL and TPOT do not see the send) where that is looser."""
    if slo is None:
        return DEFAULT_LAG_LIMIT_MS
    sets = [*slo.classes.values(), *([slo.default] if slo.default is not None else [])]
    moved = [v for limits in sets for (metric, _), v in limits.limits_ms().items()
             if metric in ("ttft", "e2e")]  # fmt: skip
    return (
        max(DEFAULT_LAG_LIMIT_MS, LAG_SHARE_OF_SLO * min(moved))
        if moved
        else (DEFAULT_LAG_LIMIT_MS)
    )


def window_bounds(
    records: Sequence[RequestRecord], trim: float, warmup_s: float = 0.0
) -> tuple[float, float]:
    """The stable window's span of scheduled times (0, 0 for no records)."""
    return _span(stable_window(records, trim, warmup_s))


def _span(window: Sequence[RequestRecord]) -> tuple[float, float]:
    if not window:
        return 0.0, 0.0
    return min(r.scheduled_s for r in window), max(r.scheduled_s for r in window)


def load_point(
    rate_rps: float,
    records: Sequence[RequestRecord],
    slo: Slo | None,
    *,
    signals: Signals | None = None,
    trim: float = 0.1,
    lag_limit_ms: float = DEFAULT_LAG_LIMIT_MS,
    scored: Score | None = None,
    warmup_s: float = 0.0,
) -> LoadPoint:
    """``scored``: ``score(records, slo, trim, warmup_s)`` where the caller has it already."""
    result = scored or score(records, slo, trim, warmup_s)
    window = stable_window(records, trim, warmup_s)
    start, end = _span(window)
    lags = [max(0.0, r.client_lag_s) * 1000.0 for r in window]
    lag_p99 = percentile(lags, 99) if lags else 0.0
    completed = sum(r.ok for r in window)
    output_per_s, prompt_per_s = token_rates(records, trim)
    goodput_by_class, attainment = _by_class(result, rate_rps)
    achieved = completed / result.window_s if result.window_s > 0 else 0.0
    ratio = concurrency_ratio(window, signals or Signals(), achieved)
    off = ratio is not None and not 1 / CONCURRENCY_TOLERANCE <= ratio <= CONCURRENCY_TOLERANCE
    late = signals.sim_clock_late_share if signals is not None else None
    return LoadPoint(
        rate_rps=rate_rps,
        window_start_s=start,
        window_end_s=end,
        duration_s=_duration(records),
        sent=len(window),
        completed=completed,
        failed=sum(not r.ok for r in window),
        timed_out=sum(bool(r.error and r.error.startswith("timed out")) for r in window),
        achieved_rps=achieved,
        # The offered rate times the share of good requests: what the load asked for and was
        # served within the SLO. Counting good requests over the window's span instead reads
        # a Poisson draw that ran above its rate as goodput above the offered rate.
        goodput_rps=rate_rps * result.good_share,
        goodput_by_class_rps=goodput_by_class,
        attainment_by_class=attainment,
        output_tokens_per_s=output_per_s,
        prompt_tokens_per_s=prompt_per_s,
        meets_slo=result.meets_slo,
        violations=result.violations,
        dists=result.dists,
        send_lag_p50_ms=percentile(lags, 50) if lags else 0.0,
        send_lag_p99_ms=lag_p99,
        client_bound=lag_p99 >= lag_limit_ms,
        signals=signals or Signals(),
        concurrency_ratio=ratio,
        inconsistent=off and result.meets_slo,
        server_behind=late is not None and late > LATE_STEP_SHARE,
    )


def concurrency_ratio(
    window: Sequence[RequestRecord], signals: Signals, achieved_rps: float
) -> float | None:
    """Little's law checked: the server's mean running plus waiting sequences over the
    achieved rate times the mean end-to-end latency (from the scheduled send) of the
    window's completed requests; None without the server's counts or a completed request."""
    latencies = [r.end_s - r.scheduled_s for r in window if r.ok and r.end_s is not None]
    if signals.running_mean is None or not latencies or achieved_rps <= 0:
        return None
    expected = achieved_rps * statistics.fmean(latencies)
    measured = signals.running_mean + (signals.waiting_mean or 0.0)
    return measured / expected if expected > 0 else None


def token_rates(records: Sequence[RequestRecord], trim: float) -> tuple[float, float]:
    """(output, prompt) tokens per second the server delivered while the point held it: the
    tokens whose chunks (a prompt's with its first chunk) arrived in the middle of the busy
    span, from the first scheduled send to the last response, ``trim`` cut at each end. Not
    the window's requests' tokens over the window's scheduled span: every request is served
    in the end, so that counts the offered load, whatever the server could do."""
    ends = [r.chunk_times_s[-1] for r in records if r.chunk_times_s]
    if not ends:
        return 0.0, 0.0
    first, last = min(r.scheduled_s for r in records), max(ends)
    low, high = first + (last - first) * trim, last - (last - first) * trim
    if high <= low:
        return 0.0, 0.0
    output = prompt = 0.0
    for r in records:
        if not r.chunk_times_s:
            continue
        per_chunk = r.output_tokens / len(r.chunk_times_s)
        times = np.asarray(r.chunk_times_s)  # a load point holds ~10^5 chunks
        output += per_chunk * int(np.count_nonzero((times >= low) & (times < high)))
        prompt += r.prompt_tokens if low <= r.chunk_times_s[0] < high else 0
    return output / (high - low), prompt / (high - low)


def _duration(records: Sequence[RequestRecord]) -> float:
    if not records:
        return 0.0
    ends = [r.end_s if r.end_s is not None else max(r.chunk_times_s, default=r.sent_s)
            for r in records]  # fmt: skip
    return max(0.0, max(ends) - min(r.scheduled_s for r in records))


def _by_class(result: Score, rate_rps: float) -> tuple[dict[str, float], dict[str, float]]:
    """(each class's good requests as a share of the whole window times the offered rate, so
    the classes add up to the goodput; each class's good requests as a share of its own)."""
    good, sent, total = result.good_by_class, result.total_by_class, result.total
    goodput = {name: rate_rps * good[name] / total for name in sorted(good)} if total else {}
    return goodput, {name: good[name] / sent[name] for name in sorted(sent)}
