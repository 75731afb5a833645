"""A point whose server did not keep up misses its SLO, whatever its latencies: its backlog
(requests due and not yet answered) grew over the stable window (``kneepoint.load.backlog``)."""

from __future__ import annotations

import pytest

from kneepoint.cli.console import point_words
from kneepoint.config.study import load_study
from kneepoint.load.backlog import backlog
from kneepoint.load.capacity import slo_margin
from kneepoint.load.point import load_point
from kneepoint.load.size import PointSize
from kneepoint.load.trust import Trust
from kneepoint.records.measure import RequestRecord
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.slo import ClassSlo, Slo
from kneepoint.sim.loadpoint import simulate_load_point
from tests.conftest import REPO

SLO = Slo(default=ClassSlo(ttft_p99_ms=30_000))
RATE = 20.0


def _served(i: int, backlog_s: float) -> RequestRecord:
    """Due every 1/RATE s, answered 0.5 s after it is due plus ``backlog_s`` per second of
    the point: a server that serves every request in 0.5 s keeps up (0), one that leaves a
    share of the load waiting makes each wait a little longer than the last."""
    due = i / RATE
    first = due + 0.1 + backlog_s * due
    end = first + 0.4
    return RequestRecord(index=i, traffic_class="c", scheduled_s=due, sent_s=due,
                         chunk_times_s=(first, end), end_s=end, prompt_tokens=8,
                         output_tokens=2)  # fmt: skip


def test_a_server_that_keeps_up_holds_its_backlog_level() -> None:
    point = load_point(RATE, [_served(i, 0.0) for i in range(1_200)], SLO)
    assert point.meets_slo and point.backlog is not None
    assert point.backlog.growth_share == pytest.approx(0.0, abs=0.01)
    assert point.backlog.margin == 0.0
    assert "by the window's percentiles" in point_words(RATE, 0, point)


def test_a_growing_backlog_misses_although_every_latency_meets_its_limit() -> None:
    # Each request waits 0.3 s longer per second of the point: over 60 s the last waits 18 s
    # more, still inside the 30 s TTFT limit; the server leaves near a quarter of the load
    # waiting, past the noise (3 sigmas of sqrt(2 x 20 x 48) over the 48 s window).
    records = [_served(i, 0.3) for i in range(1_200)]
    assert load_point(RATE, records, SLO, trust=_off()).meets_slo  # the latencies alone pass
    point = load_point(RATE, records, SLO)
    assert not point.meets_slo and point.backlog is not None
    # In system at t: those due in ((t - 0.5) / 1.3, t], so it grows 0.3 / 1.3 of the rate.
    assert point.backlog.growth_share == pytest.approx(0.3 / 1.3, abs=0.005)
    assert point.backlog.end_requests > point.backlog.start_requests
    assert point.violations == (
        f"backlog {point.backlog.start_requests} -> {point.backlog.end_requests} requests over "
        "the window (+23% of the offered rate a second): the server does not keep up",
    )
    assert point.backlog.settled
    least = min(point.backlog.growth_share, point.backlog.second_half_growth_share)
    assert point.backlog.margin == pytest.approx(0.95 / (1.0 - least))  # on the rate scale
    assert slo_margin(point, SLO) == point.backlog.margin  # past every latency's own ratio
    assert "misses SLO by its backlog (" in point_words(RATE, 0, point)


def _off() -> Trust:
    return Trust.of(SLO, MeasurementSpec(max_backlog_growth=None))


def test_a_rise_within_the_backlogs_noise_never_fails_a_point() -> None:
    # Eight requests over a short point: a rise of a few requests is the count's own noise.
    records = [_served(i, 0.5) for i in range(8)]
    found = backlog(records, (records[1].scheduled_s, records[-2].scheduled_s), RATE, 0.05)
    assert found is not None and found.growth_share > 0.05
    assert found.margin == 0.0


def test_a_server_still_filling_up_is_not_judged() -> None:
    # Each answer takes 8 s, and the point's arrivals span 10 s: requests in flight grow to
    # its end as a steady server fills up, and the window's middle comes before 8 s.
    records = [
        RequestRecord(
            index=i,
            traffic_class="c",
            scheduled_s=i / RATE,
            sent_s=i / RATE,
            chunk_times_s=(i / RATE + 0.1, i / RATE + 8.0),
            end_s=i / RATE + 8.0,
            prompt_tokens=8,
            output_tokens=2,
        )
        for i in range(200)
    ]
    point = load_point(RATE, records, SLO)
    assert point.backlog is not None and point.backlog.growth_share > 0.5
    assert not point.backlog.settled and point.backlog.margin == 0.0 and point.meets_slo


def test_the_rule_can_be_turned_off_and_needs_an_slo() -> None:
    records = [_served(i, 0.3) for i in range(1_200)]
    off = load_point(RATE, records, SLO, trust=_off())
    assert off.backlog is not None and off.backlog.margin == 0.0
    assert load_point(RATE, records, None).backlog is None


def test_the_simulators_overload_that_a_bigger_batch_hides_reads_as_a_miss() -> None:
    # frontend-bound with 2 API servers: 512 sequences met the SLO's latencies at 40 req/s
    # while the backlog grew 198 -> 539 requests (2026-12-02); 28 req/s it sustains.
    study = load_study(REPO / "configs" / "scenarios" / "frontend-bound.yaml")
    engine = study.engine.replace(api_server_count=2, max_num_seqs=512)
    size = PointSize.for_study(study, study.tuning.screen_seconds)
    over, under = (
        simulate_load_point(study, r, size.requests(r), engine, 0, warmup_s=size.warmup_s).point
        for r in (40.0, 28.0)
    )
    assert not over.meets_slo and over.backlog is not None and over.backlog.margin > 1.0
    assert all("backlog" not in v for v in over.violations[:-1])
    assert under.meets_slo and under.backlog is not None and under.backlog.margin == 0.0
