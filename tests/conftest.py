"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kneepoint.probes.measure import Measured

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"


def client_server_gaps(measured: Measured) -> dict[str, tuple[float, float, float]]:
    """Per metric (ttft, e2e): the client's mean from its send minus the server's histogram
    mean over the load, the server's mean (ms), and how many requests the server counted.
    The first and last scrapes bracket the load."""
    ok = [r for r in measured.records if r.ok]
    client = {
        "ttft": [(r.chunk_times_s[0] - r.sent_s) * 1e3 for r in ok],
        "e2e": [(r.end_s - r.sent_s) * 1e3 for r in ok if r.end_s is not None],
    }
    first, last = measured.scrapes[0], measured.scrapes[-1]
    gaps = {}
    for metric, values in client.items():
        before, after = first.histogram(metric), last.histogram(metric)
        assert before is not None and after is not None, metric
        delta = after.minus(before)
        server_ms = delta.sum / delta.count * 1e3
        gaps[metric] = (float(np.mean(values)) - server_ms, server_ms, delta.count)
    return gaps
