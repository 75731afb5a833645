"""Little's law on every load point: the server's own concurrency against the client's, from
vLLM's e2e histogram where it exports one, else from its gauges where enough scrapes landed,
judged where the point held a steady state (kneepoint.load.trust)."""

from __future__ import annotations

import json

import pytest

from kneepoint.load.point import load_point
from kneepoint.records.loadpoint import Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.slo import ClassSlo, Slo

from .conftest import REPO

REAL = REPO / "tests" / "fixtures" / "real" / "h100-llama8b-chat"
SLO = Slo(default=ClassSlo(e2e_p99_ms=5000))
CONCURRENCY_TOLERANCE = MeasurementSpec().littles_law_tolerance


def _records(rate_rps: float, latency_s: float, count: int = 200) -> list[RequestRecord]:
    """Requests at ``rate_rps``, each answered in ``latency_s``: rate x latency in flight."""
    return [RequestRecord(index=i, traffic_class="c", scheduled_s=i / rate_rps,
                          sent_s=i / rate_rps, prompt_tokens=10, output_tokens=4,
                          chunk_times_s=tuple(i / rate_rps + latency_s * k / 3 + 0.01
                                              for k in range(4)),
                          end_s=i / rate_rps + latency_s + 0.01)
            for i in range(count)]  # fmt: skip


def test_a_server_that_held_rate_times_latency_is_counted() -> None:
    point = load_point(10.0, _records(10.0, 2.0), SLO, signals=Signals(running_mean=20.0))
    assert point.concurrency_ratio == pytest.approx(1.0, rel=0.03)
    assert point.valid and point.invalid_reason() is None


def test_a_steady_point_whose_server_counts_another_load_is_not_counted() -> None:
    # 20 in flight by the client's clock, 80 by the server's: another server behind the URL,
    # or metrics that do not match the window.
    point = load_point(10.0, _records(10.0, 2.0), SLO,
                       signals=Signals(running_mean=60.0, waiting_mean=20.0))  # fmt: skip
    assert point.meets_slo and point.concurrency_ratio == pytest.approx(4.0, rel=0.03)
    assert not point.valid
    assert point.invalid_reason() == ("inconsistent: the server held 3.96x the sequences "
                                      "rate x latency says; not counted")  # fmt: skip


def test_past_the_knee_the_ratio_is_kept_not_judged() -> None:
    # A failing point builds its queue through the window: the law does not hold there.
    point = load_point(10.0, _records(10.0, 8.0), SLO, signals=Signals(running_mean=20.0))
    assert not point.meets_slo and point.concurrency_ratio == pytest.approx(0.25, rel=0.03)
    assert point.valid


def test_the_server_s_own_histogram_judges_without_any_gauge() -> None:
    # 200 requests of 2.01 s each from the client's sends; the server's e2e histogram summed
    # 1.8 s each (the API server's parsing is not in its clock): 0.9, counted.
    point = load_point(10.0, _records(10.0, 2.0), SLO,
                       signals=Signals(server_e2e_sum_s=360.0, server_requests=200))  # fmt: skip
    assert point.concurrency_ratio == pytest.approx(360.0 / (200 * 2.01), rel=1e-6)
    assert point.valid
    # half the requests reached this server (another replica shares the URL): not counted
    half = load_point(10.0, _records(10.0, 2.0), SLO,
                      signals=Signals(server_e2e_sum_s=180.0, server_requests=100))  # fmt: skip
    assert half.concurrency_ratio == pytest.approx(0.448, abs=1e-3)
    assert half.inconsistent and not half.valid


def test_the_histogram_is_preferred_to_gauges_that_sampled_an_idle_server() -> None:
    # The gauges read 2 of 20 in flight (scrapes landed between bursts); the histogram says 20.
    point = load_point(10.0, _records(10.0, 2.0), SLO,
                       signals=Signals(running_mean=2.0, server_e2e_sum_s=400.0,
                                       server_requests=200))  # fmt: skip
    assert point.concurrency_ratio == pytest.approx(0.995, abs=0.01) and point.valid


def test_gauges_from_too_few_landed_scrapes_are_not_judged() -> None:
    # A busy 2-core host: 19-27 of 82-93 scrapes due landed (issue "Step 12"), and those read
    # 0.00-0.56. Below the study's min_scrape_share the gauges say nothing either way.
    thin = Signals(running_mean=2.0, scrape_share=0.25)
    assert load_point(10.0, _records(10.0, 2.0), SLO, signals=thin).concurrency_ratio is None
    landed = Signals(running_mean=2.0, scrape_share=0.9)
    point = load_point(10.0, _records(10.0, 2.0), SLO, signals=landed)
    assert point.concurrency_ratio == pytest.approx(0.1, rel=0.03) and point.inconsistent


def test_without_the_server_s_counts_there_is_nothing_to_check() -> None:
    point = load_point(10.0, _records(10.0, 2.0), SLO)
    assert point.concurrency_ratio is None and point.valid


def test_the_tolerance_holds_every_steady_point_of_the_real_h100_runs() -> None:
    # vLLM 0.26 on an H100 (tests/fixtures/real): running + waiting over achieved rate times
    # mean e2e, from what the recordings kept. Every point that met the SLO reads 0.81-1.03;
    # the overloaded ones, whose queue grew through the window, down to 0.32.
    steady, overloaded = [], []
    for config in ("base", "defaults", "fp8"):
        sweep = json.loads((REAL / config / "sweep.json").read_text())
        for entry in sweep["points"]:
            point, signals = entry["point"], entry["point"]["signals"]
            latency_s = point["dists"]["chat"]["e2e"]["mean_ms"] / 1e3
            ratio = (signals["running_mean"] + signals["waiting_mean"]) / (
                point["achieved_rps"] * latency_s
            )
            (steady if point["meets_slo"] else overloaded).append(ratio)
    assert len(steady) == 13 and min(steady) > 0.8 and max(steady) < 1.05
    assert min(steady) > 1 / CONCURRENCY_TOLERANCE and max(steady) < CONCURRENCY_TOLERANCE
    assert min(overloaded) < 1 / CONCURRENCY_TOLERANCE  # why failing points are not judged
