"""Simulated GPU counters read the way real instruments would on each kind of bottleneck."""

from __future__ import annotations

from kneepoint.config.study import load_study
from kneepoint.sim.engine import SimEngine
from kneepoint.sim.loadpoint import simulate_load_point
from kneepoint.sim.telemetry import GpuTelemetry

from .conftest import CONFIGS


def _sample(name: str, rate: float, requests: int, *overrides: str) -> dict[str, float | None]:
    spec = load_study(CONFIGS / "scenarios" / f"{name}.yaml", overrides)
    point = simulate_load_point(spec, rate, requests)
    steps = point.load.run.steps
    middle = steps[len(steps) // 2].start_s
    memory = SimEngine(spec.gpu, spec.model, spec.engine).memory
    telemetry = GpuTelemetry(spec.gpu, memory, spec.gpu.bf16_tflops, seed=1)
    return telemetry.sample(steps, middle - 2.0, middle + 2.0).model_dump()


def test_compute_bound_reads_busy_tensor_cores() -> None:
    sample = _sample("compute-bound", 8.0, 200)
    assert sample["gpu_util_pct"] is not None and sample["gpu_util_pct"] >= 90
    assert sample["tensor_util_pct"] is not None and sample["tensor_util_pct"] >= 35
    assert sample["dram_bw_util_pct"] is not None and sample["dram_bw_util_pct"] < 30


def test_bandwidth_bound_reads_busy_dram_idle_tensor_cores() -> None:
    sample = _sample("bandwidth-bound", 1.1, 150, "gpu=h100-sxm")
    assert sample["gpu_util_pct"] is not None and sample["gpu_util_pct"] >= 90
    assert sample["dram_bw_util_pct"] is not None and sample["dram_bw_util_pct"] >= 40
    assert sample["tensor_util_pct"] is not None and sample["tensor_util_pct"] < 10
    assert sample["sm_util_pct"] is not None and sample["sm_util_pct"] < 70


def test_gpus_without_gpm_report_only_nvml() -> None:
    sample = _sample("cache-bound", 8.0, 100)  # an A100: no GPM
    assert sample["sm_util_pct"] is None and sample["dram_bw_util_pct"] is None
    assert sample["gpu_util_pct"] is not None and sample["memory_used_mib"] is not None


def test_sync_scheduling_leaves_the_gpu_idle_between_steps() -> None:
    sample = _sample("scheduling-bound", 80.0, 600)
    assert sample["gpu_util_pct"] is not None and sample["gpu_util_pct"] <= 75
