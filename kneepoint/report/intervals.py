"""Bootstrap intervals for the report's latency percentiles, from the request records the run
kept for every load point (``kneepoint.run.folder.write_point``): the same stable window and
classes the point was scored on, requests resampled with replacement
(``kneepoint.load.bootstrap``)."""

from __future__ import annotations

import dataclasses
import gzip
import math
from collections.abc import Sequence
from pathlib import Path

from kneepoint.load import mean_percentile_interval, metric_values, ramp_seconds, stable_window
from kneepoint.records import LoadPoint, RequestRecord, StudySpec, SweepPoint
from kneepoint.report.data import Curve, slo_metrics

TRIM = 0.1
"""The share of the scheduled span cut at each end, as ``load_point`` cuts it."""
KeptPoints = dict[str, list[Path]]
"""Each kept point's summary file, by ``r<repeat>-<rate>rps``."""


def with_intervals(kept: KeptPoints, study: StudySpec, curve: Curve, confidence: float) -> Curve:
    """``curve`` with an interval on every SLO percentile whose requests the run kept
    (``kept``: ``kept_points`` of the run's folder)."""
    warmup_s = ramp_seconds(study.workload, study.slo)
    points = []
    for point in curve.points:
        entries = [
            e for e in curve.result.points if e.counted and round(e.rate_rps, 6) == point.rate_rps
        ]
        windows = [_window(kept, e, warmup_s) for e in entries]
        if not entries or any(w is None for w in windows):
            points.append(point)
            continue
        intervals = slo_intervals(study, [w for w in windows if w is not None], confidence)
        points.append(dataclasses.replace(point, intervals_ms=intervals))
    return dataclasses.replace(curve, points=tuple(points))


def slo_intervals(
    study: StudySpec, windows: Sequence[Sequence[RequestRecord]], confidence: float
) -> dict[str, tuple[float, float]]:
    """Per SLO metric label, the interval of the mean over ``windows`` (one per repeat)."""
    found = {}
    for label, metric, pct, _ in slo_metrics(study):
        name = label.split(" ", 1)[0]
        repeats = [
            [metric_values([r], metric) for r in window if r.traffic_class == name]
            for window in windows
        ]
        low, high = mean_percentile_interval(repeats, pct, confidence=confidence)
        if not math.isnan(low):  # some repeat had values
            found[label] = (low, high)
    return found


def kept_points(run: Path) -> KeptPoints:
    """Every kept point's summary file, by the stem its rate and repeat give it."""
    found: dict[str, list[Path]] = {}
    for path in sorted(run.glob("trials/*/points/*.point.json")):
        found.setdefault(_stem_key(path.name.removesuffix(".point.json")), []).append(path)
    return found


def _stem_key(stem: str) -> str:
    # "<label>-r<repeat>-<rate>rps": the label may itself hold dashes (validate-challenger)
    head, _, rate = stem.rpartition("-")
    repeat = head.rpartition("-r")[2]
    return f"r{repeat}-{rate}"


def _window(kept: KeptPoints, entry: SweepPoint, warmup_s: float) -> list[RequestRecord] | None:
    """The stable window of the requests measured at ``entry``: the kept point with the same
    summary (window, requests sent), its records cut as they were scored."""
    key = f"r{entry.repeat}-{entry.rate_rps:.4g}rps"
    for path in kept.get(key, []):
        stored = LoadPoint.model_validate_json(path.read_text())
        if (stored.window_start_s, stored.window_end_s, stored.sent) != (
            entry.point.window_start_s,
            entry.point.window_end_s,
            entry.point.sent,
        ):
            continue
        requests = path.with_name(path.name.removesuffix(".point.json") + ".requests.jsonl.gz")
        if not requests.is_file():
            return None
        with gzip.open(requests, "rt", encoding="utf-8") as handle:
            records = [RequestRecord.model_validate_json(line) for line in handle if line.strip()]
        return stable_window(records, TRIM, warmup_s)
    return None
