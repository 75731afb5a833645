"""A simulator that falls behind its own clock says so, and its load point is not counted.

The HTTP simulator (``kneepoint sim serve``) paces each step's tokens by the wall clock; on a
busy host it can send them late, and the latencies a client then measures are the host's.
It exports how late each step was (``kneepoint:sim_clock_lag_seconds``); the share of a
window's steps over 5 ms late becomes ``Signals.sim_clock_late_share``, and a point with more
than 1% of them late (clock lag p99 over 5 ms, the goal ``benchmarks/sim_speed.py`` measures)
is ``server_behind``: reported with its reason, never counted.
"""

from __future__ import annotations

import pytest

from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.load.point import load_point
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.memory import plan_memory
from kneepoint.probes.telemetry.prom import parse_metrics
from kneepoint.probes.telemetry.signals import summarize_signals
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.sim.metrics import VllmMetrics

H100, LLAMA_8B = gpu_catalogue()["h100-sxm"], model_catalogue()["llama-3.1-8b"]


def _metrics() -> VllmMetrics:
    engine = resolve_engine(EngineConfig(model="m"), H100, LLAMA_8B)
    return VllmMetrics("m", engine, plan_memory(H100, LLAMA_8B, engine), "auto")


def _late_share(lags_s: list[float]) -> float | None:
    metrics = _metrics()
    metrics.clock_lag.observe(0.5)  # before the window: not counted
    before = parse_metrics(metrics.render().decode(), at_s=0.0)
    for lag in lags_s:
        metrics.clock_lag.observe(lag)
    after = parse_metrics(metrics.render().decode(), at_s=10.0)
    return summarize_signals([before, after], [], 0.0, 10.0).sim_clock_late_share


def test_the_share_of_late_steps_is_read_over_the_window() -> None:
    assert _late_share([0.001] * 990 + [0.004] * 5 + [0.006] * 5) == pytest.approx(0.005)
    assert _late_share([0.001] * 90 + [0.02] * 10) == pytest.approx(0.1)


def test_a_real_server_exports_no_clock_lag() -> None:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
    scrapes = [parse_metrics(text, at_s=0.0), parse_metrics(text, at_s=10.0)]
    assert summarize_signals(scrapes, [], 0.0, 10.0).sim_clock_late_share is None


def _record(i: int) -> RequestRecord:
    at = i * 0.1
    return RequestRecord(index=i, traffic_class="chat", scheduled_s=at, sent_s=at,
                         chunk_times_s=(at + 0.05, at + 0.07), end_s=at + 0.07,
                         prompt_tokens=8, output_tokens=2)  # fmt: skip


def _records() -> list[RequestRecord]:
    return [_record(i) for i in range(100)]


def test_a_point_the_simulator_could_not_clock_is_not_counted() -> None:
    late = load_point(10.0, _records(), None, signals=Signals(sim_clock_late_share=0.02))
    assert late.server_behind and not late.valid
    assert late.invalid_reason() == (
        "simulator behind its clock: 2.0% of steps over 5 ms late; not counted"
    )
    on_time = load_point(10.0, _records(), None, signals=Signals(sim_clock_late_share=0.01))
    assert on_time.valid and not on_time.server_behind
    assert load_point(10.0, _records(), None).valid  # a real server: nothing to judge
