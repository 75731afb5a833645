"""NVML/GPM readings averaged over a load point's window stay inside their 0-100% bounds.

Source: a real H100 run (vLLM 0.26.0, Gemma-3-12B shapes with fp8 weights, 2026-11-24) had
every NVML sample of a window at 100% busy; their time-weighted mean came to
100.00000000000001, the Signals record refused it, and the sweep died mid-run.
"""

from __future__ import annotations

import pytest

from kneepoint.probes.telemetry.signals import summarize_signals
from kneepoint.records.telemetry import GpuSample


def _busy(start_s: float, end_s: float, power_w: float = 700.0) -> GpuSample:
    return GpuSample(start_s=start_s, end_s=end_s, gpu_util_pct=100.0, sm_util_pct=100.0,
                     power_w=power_w)  # fmt: skip


def test_a_window_of_fully_busy_samples_reads_exactly_100() -> None:
    # Windows 0-0.1, 0.1-0.2, 0.2-0.9 s: weights whose float sum makes 100.00000000000001.
    samples = [_busy(0.0, 0.1), _busy(0.1, 0.2), _busy(0.2, 0.9)]
    signals = summarize_signals([], samples, 0.0, 0.9)
    assert signals.gpu_util_pct == 100.0
    assert signals.sm_util_pct == 100.0


def test_power_is_averaged_not_capped() -> None:
    samples = [_busy(0.0, 0.5, power_w=650.0), _busy(0.5, 1.0, power_w=710.0)]
    assert summarize_signals([], samples, 0.0, 1.0).power_w == pytest.approx(680.0)
