"""The trust rules on real points: vLLM's CPU build serving the tiny Llama, swept by
`kneepoint sweep` on the 2-core machine with the server at the load generator's CPU priority
(`nice0`, where the generator fell behind) and 10 below it (`nice10`), recorded 2026-11-25
(tests/fixtures/real/cpu-tiny-llama/README.md). Each point is rebuilt from its request records
and its `/metrics` snapshots before and after the load, as the sweep scored it."""

from __future__ import annotations

import gzip

import pytest

from kneepoint.config import load_study
from kneepoint.load.point import load_point
from kneepoint.load.scoring import percentile, stable_window
from kneepoint.load.size import PointSize
from kneepoint.load.trust import Trust, meets_from_sends
from kneepoint.probes.telemetry.prom import parse_metrics
from kneepoint.probes.telemetry.signals import summarize_signals
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.measure import RequestRecord
from kneepoint.records.slo import ClassSlo, Slo

from .conftest import REPO

CPU = REPO / "tests" / "fixtures" / "real" / "cpu-tiny-llama"
STUDY = load_study(CPU / "nice0" / "study.yaml")
SIZE = PointSize.for_study(STUDY, STUDY.tuning.screen_seconds)


def _records(run: str, rate: int) -> list[RequestRecord]:
    path = CPU / run / "points" / f"sweep-r0-{rate}rps.requests.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        return [RequestRecord.model_validate_json(line) for line in handle]


def _point(
    run: str, rate: int, slo: Slo | None = STUDY.slo, landed: float = 1.0, backlog: bool = True
) -> LoadPoint:
    """The point rebuilt: its records, and signals from the snapshots that bracket the load
    (``landed``: the share of the scrapes due in its window that landed; ``backlog``: whether
    the backlog rule, which came after the recording, judges it too)."""
    records = _records(run, rate)
    texts = [gzip.decompress((CPU / run / "points" / f"sweep-r0-{rate}rps.metrics-{when}.prom.gz")
                             .read_bytes()).decode() for when in ("before", "after")]  # fmt: skip
    end = max(r.end_s or 0.0 for r in records) + 0.1
    scrapes = [parse_metrics(texts[0], -0.1), parse_metrics(texts[1], end)]
    window = stable_window(records, 0.1, SIZE.warmup_s)
    start, stop = min(r.scheduled_s for r in window), max(r.scheduled_s for r in window)
    signals = summarize_signals(scrapes, [], start, stop, scrape_share=landed)
    spec = STUDY.measurement
    if not backlog:
        spec = spec.model_copy(update={"max_backlog_growth": None})
    return load_point(float(rate), records, slo, signals=signals, warmup_s=SIZE.warmup_s,
                      trust=Trust.of(slo, spec))  # fmt: skip


@pytest.mark.parametrize(
    ("run", "rate"), [(r, n) for r in ("nice0", "nice10") for n in (32, 38, 40)]
)
def test_a_recorded_point_rebuilds_as_the_sweep_scored_it(run: str, rate: int) -> None:
    kept = LoadPoint.model_validate_json(
        (CPU / run / "points" / f"sweep-r0-{rate}rps.point.json").read_text())  # fmt: skip
    rebuilt = _point(run, rate, backlog=False)
    assert rebuilt.meets_slo == kept.meets_slo and rebuilt.client_bound == kept.client_bound
    assert rebuilt.late_send_share == pytest.approx(kept.late_send_share)
    assert rebuilt.concurrency_ratio == pytest.approx(kept.concurrency_ratio, rel=1e-9)


def test_a_backlog_a_short_window_cannot_judge_leaves_the_verdict_to_the_latencies() -> None:
    # nice10 at 38 req/s met the 2 s TTFT p99, its TTFT rising along the point (~0.3 s to
    # 2.2 s by schedule) as the requests in flight grew 30 -> 77: +23% of the rate a second,
    # but 47 requests over a 4.6 s window is inside arrivals-less-departures noise (56).
    point = _point("nice10", 38)
    assert point.meets_slo and point.backlog is not None and point.backlog.settled
    assert point.backlog.growth_share > 0.15 and point.backlog.margin == 0.0
    assert point.backlog.end_requests - point.backlog.start_requests < point.backlog.noise_requests


def test_a_pass_with_late_sends_counts() -> None:
    # nice0 at 32 req/s: 27% of the window's sends more than 100 ms late (5% of the 2 s TTFT
    # limit), send lag p99 1.1 s; the SLO still met, counting TTFT from the schedule
    point = _point("nice0", 32)
    assert point.late_send_share is not None and point.late_send_share > 0.25
    assert point.send_lag_p99_ms > 1000 and point.meets_slo and point.valid


def test_a_miss_the_server_s_own_histogram_confirms_counts() -> None:
    # nice0 at 40 req/s: 42% of sends late, yet vLLM's own TTFT p99 (its histogram, from its
    # arrival stamp) was ~4.9 s against the 2 s limit: a miss the lag did not make
    point = _point("nice0", 40)
    assert point.late_send_share is not None and point.late_send_share > 0.4
    assert not point.meets_slo and not point.client_bound and point.valid
    assert point.signals.server_latency["ttft"].p99_ms > 4000


def test_a_miss_only_the_client_s_lag_made_is_client_bound() -> None:
    # nice0 at 32 req/s, 27% of its sends late, judged by a TTFT p90 limit between its p90
    # from the schedule (1,050 ms) and from the actual sends (730 ms): the verdict rests on
    # the client's lag, so the point cannot tell. With the late-send share limit above its
    # 27%, the client counts as on schedule and the point as a plain miss.
    records = _records("nice0", 32)
    window = stable_window(records, 0.1, SIZE.warmup_s)
    from_schedule = percentile([r.ttft_ms for r in window], 90)
    from_send = percentile([r.ttft_ms - max(0.0, r.client_lag_s) * 1000 for r in window], 90)
    assert from_send < 0.8 * from_schedule  # the lag moved the p90 by a fifth or more
    slo = Slo(default=ClassSlo(ttft_p90_ms=(from_send + from_schedule) / 2))
    point = _point("nice0", 32, slo)
    assert meets_from_sends(window, slo, point.dists) and not point.meets_slo
    assert point.client_bound and not point.valid
    loose = STUDY.measurement.model_copy(update={"late_send_share": 0.5})
    told = load_point(32.0, records, slo, signals=point.signals, warmup_s=SIZE.warmup_s,
                      trust=Trust.of(slo, loose))  # fmt: skip
    assert not told.client_bound and told.valid


def test_little_s_law_from_the_histogram_holds_and_thin_gauges_are_not_judged() -> None:
    # vLLM's e2e histogram against the client's send-to-end latencies: 0.96-1.00 on every
    # recorded point, whatever the client's lag
    ratios = [_point(run, rate).concurrency_ratio for run in ("nice0", "nice10")
              for rate in (32, 38, 40)]  # fmt: skip
    assert all(r is not None and 0.95 <= r <= 1.0 for r in ratios), ratios
    # The gauges alone, from the two snapshots that bracket the load (the server idle in
    # both), read ~0 in flight: judged, that would call a steady point inconsistent. With
    # only 2 of the window's ~10 scrapes due landed, below min_scrape_share, they are not.
    point = _point("nice10", 32)
    gauges = point.signals.model_copy(update={"server_e2e_sum_s": None, "server_requests": None})
    records = _records("nice10", 32)
    thin = gauges.model_copy(update={"scrape_share": 0.2})
    assert load_point(32.0, records, STUDY.slo, signals=thin,
                      warmup_s=SIZE.warmup_s).concurrency_ratio is None  # fmt: skip
    landed = gauges.model_copy(update={"scrape_share": 1.0})
    judged = load_point(32.0, records, STUDY.slo, signals=landed, warmup_s=SIZE.warmup_s)
    assert judged.concurrency_ratio is not None and judged.concurrency_ratio < 0.5
    assert judged.inconsistent
