"""A load point's records scored into a ``LoadPoint``: latency, goodput, and trust.

Whether the point can tell what it measured (a client that fell behind its schedule, a server
whose own counts describe another load) is judged by ``kneepoint.load.trust``; a point that
cannot tell is recorded but never counted as a pass or a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from kneepoint.load.backlog import backlog, violation
from kneepoint.load.origin import counted
from kneepoint.load.scoring import Score, score, stable_window
from kneepoint.load.trust import (
    Trust,
    concurrency_ratio,
    late_share,
    meets_from_sends,
    off_by,
    send_lags_ms,
    server_meets,
)
from kneepoint.records import LoadPoint, RequestRecord, Signals, Slo

LATE_STEP_SHARE = 0.01
"""A simulator may send at most this share of a point's steps over 5 ms late (its clock lag
p99 under 5 ms): beyond it the host's CPU, not the simulated engine, shapes the latencies."""


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
    trust: Trust | None = None,
    scored: Score | None = None,
    warmup_s: float = 0.0,
) -> LoadPoint:
    """``scored``: ``score(records, slo, trim, warmup_s)`` where the caller has it already,
    from the origin ``trust`` counts latency from; ``trust``: the rules the point is judged by
    (the defaults for ``slo`` when None)."""
    trust = trust or Trust.of(slo)
    signals = signals or Signals()
    from_schedule = None
    if trust.latency_from != "schedule":
        from_schedule = rate_rps * score(records, slo, trim, warmup_s).good_share
        records = counted(records, trust.latency_from)
    result = scored or score(records, slo, trim, warmup_s)
    window = stable_window(records, trim, warmup_s)
    start, end = _span(window)
    lag_p50, lag_p99 = send_lags_ms(window)
    late = late_share(window, trust.late_send_ms)
    completed = sum(r.ok for r in window)
    output_per_s, prompt_per_s = token_rates(records, trim)
    goodput_by_class, attainment = _by_class(result, rate_rps)
    achieved = completed / result.window_s if result.window_s > 0 else 0.0
    ratio = concurrency_ratio(records, window, signals, achieved, trust)
    kept_up = backlog(records, (start, end), rate_rps, trust.max_backlog_growth) if slo else None
    meets, violations = result.meets_slo, result.violations
    if kept_up is not None and kept_up.margin > 1.0:
        meets, violations = False, (*violations, violation(kept_up))
    behind = late > trust.late_send_share and not meets
    late_step = signals.sim_clock_late_share
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
        goodput_rule=slo.goodput_rule if slo is not None else "every_limit",
        latency_from=trust.latency_from,
        goodput_from_schedule_rps=from_schedule,
        goodput_by_class_rps=goodput_by_class,
        attainment_by_class=attainment,
        output_tokens_per_s=output_per_s,
        prompt_tokens_per_s=prompt_per_s,
        meets_slo=meets,
        violations=violations,
        backlog=kept_up,
        dists=result.dists,
        send_lag_p50_ms=lag_p50,
        send_lag_p99_ms=lag_p99,
        late_send_share=late,
        client_bound=behind
        and (meets_from_sends(window, slo, result.dists) or server_meets(slo, signals) is True),
        signals=signals,
        concurrency_ratio=ratio,
        inconsistent=off_by(ratio, trust) and meets,
        server_behind=late_step is not None and late_step > LATE_STEP_SHARE,
        host_busy=trust.host_busy(signals),
    )


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
    # Every record's chunks in one array (a load point holds ~10^5), counted per record in
    # one pass; the rates are then summed record by record, in order, as ever.
    timed = [r for r in records if r.chunk_times_s]
    times = np.fromiter(chain.from_iterable(r.chunk_times_s for r in timed), dtype=np.float64)
    lengths = [len(r.chunk_times_s) for r in timed]
    starts = np.cumsum([0, *lengths[:-1]])
    inside = np.add.reduceat(((times >= low) & (times < high)).astype(np.int64), starts)
    output = prompt = 0.0
    for r, length, count in zip(timed, lengths, inside.tolist(), strict=True):
        output += r.output_tokens / length * count
        prompt += r.prompt_tokens if low <= r.chunk_times_s[0] < high else 0
    return output / (high - low), prompt / (high - low)


def _duration(records: Sequence[RequestRecord]) -> float:
    if not records:
        return 0.0
    ends = [
        r.end_s if r.end_s is not None else max(r.chunk_times_s, default=r.sent_s) for r in records
    ]
    return max(0.0, max(ends) - min(r.scheduled_s for r in records))


def _by_class(result: Score, rate_rps: float) -> tuple[dict[str, float], dict[str, float]]:
    """(each class's good requests as a share of the whole window times the offered rate, so
    the classes add up to the goodput; each class's good requests as a share of its own)."""
    good, sent, total = result.good_by_class, result.total_by_class, result.total
    goodput = {name: rate_rps * good[name] / total for name in sorted(good)} if total else {}
    return goodput, {name: good[name] / sent[name] for name in sorted(sent)}
