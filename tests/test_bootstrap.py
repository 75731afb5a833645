"""Bootstrap intervals of latency percentiles: requests resampled as clusters, failures
counted, the mean over repeats, and the interval in the report's latency table."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from kneepoint.load.bootstrap import mean_percentile_interval
from kneepoint.report.data import CurvePoint
from kneepoint.report.measured import _value

from .conftest import TuneRun


def _naive(values: np.ndarray, pct: float, seed: int = 1) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    drawn = [np.percentile(rng.choice(values, values.size), pct) for _ in range(2000)]
    low, high = np.percentile(drawn, [2.5, 97.5])
    return float(low), float(high)


def test_one_value_per_request_agrees_with_a_plain_bootstrap() -> None:
    ttft = np.random.default_rng(0).lognormal(4.0, 0.5, size=1500)
    low, high = mean_percentile_interval([[[v] for v in ttft]], 95)
    naive_low, naive_high = _naive(ttft, 95)
    assert low < np.percentile(ttft, 95) < high
    assert low == pytest.approx(naive_low, rel=0.03) and high == pytest.approx(naive_high, rel=0.03)


def test_a_requests_gaps_are_resampled_together() -> None:
    # 40 requests, each at its own pace (its gaps jitter by 1 ms around it): the p95 gap rests
    # on 40 paces, not 4,000 gaps; a bootstrap of single gaps claims several times the certainty.
    rng = np.random.default_rng(2)
    paces = rng.normal(30.0, 5.0, size=40)
    requests = [list(p + rng.normal(0.0, 1.0, size=100)) for p in paces]
    low, high = mean_percentile_interval([requests], 95)
    gaps = np.concatenate(requests)
    naive_low, naive_high = _naive(gaps, 95)
    assert high - low > 3 * (naive_high - naive_low)
    assert low < np.percentile(gaps, 95) <= high


def test_failures_push_the_upper_end_to_infinity() -> None:
    # 2% of requests failed: the p99 is infinite in nearly every resample.
    values = [[float(v)] for v in np.linspace(100, 200, 980)] + [[math.inf]] * 20
    _, high = mean_percentile_interval([values], 99)
    assert math.isinf(high)
    ok_low, ok_high = mean_percentile_interval([values[:980]], 99)
    assert math.isfinite(ok_high) and ok_low < 200


def test_the_mean_over_repeats_narrows_with_more_repeats_and_sits_between_them() -> None:
    rng = np.random.default_rng(3)
    repeats = [[[float(v)] for v in rng.normal(mu, 10.0, size=500)] for mu in (100.0, 110.0)]
    low, high = mean_percentile_interval(repeats, 50)
    assert 100 < low < 105 < high < 110
    one_low, one_high = mean_percentile_interval(repeats[:1], 50)
    assert high - low < one_high - one_low
    assert all(math.isnan(x) for x in mean_percentile_interval([[[], []]], 50))


def test_the_interval_is_shown_beside_the_mean() -> None:
    point = CurvePoint(8.0, {"chat ttft_p99": 95.0}, 8.0, 1, (),
                       intervals_ms={"chat ttft_p99": (90.04, math.inf)})  # fmt: skip
    assert _value(point, "chat ttft_p99") == "95.0 (90.0-inf)"


def test_the_report_gives_every_slo_percentile_an_interval_around_its_mean(
    small_run: TuneRun,
) -> None:
    report = (small_run.folder / "report.md").read_text()
    table = report.split("## Latency vs load", 1)[1].split("## Signals", 1)[0]
    assert "ms (mean, interval)" in table
    cells = re.findall(r"\| ([\d.]+) \(([\d.]+)-([\d.]+|inf)\)", table)
    assert len(cells) >= 8
    inside = [float(lo) <= float(mean) <= float(hi) for mean, lo, hi in cells]
    # the shown mean interpolates; resamples read nearest ranks: it may sit a hair outside
    assert sum(inside) >= 0.8 * len(inside), cells
