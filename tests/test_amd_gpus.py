"""AMD's Instinct parts (the `mi300x` and `mi325x` catalogue entries): a study names them as
it names an NVIDIA GPU, the plan lays tensor parallelism over their Infinity Fabric and offers
no Marlin kernel (vLLM's quantization hardware table: none on AMD GPUs), and the simulator
reads them as kneepoint would read a real one, through vLLM's /metrics with no NVML."""

from __future__ import annotations

from pathlib import Path

from kneepoint.config import knob_catalogue, load_study
from kneepoint.measure.progress import LogProgress
from kneepoint.planning.layouts import Shape, layout
from kneepoint.planning.plan import plan_lengths
from kneepoint.tune.diagnose import measure_and_diagnose

from .conftest import QUICKSTART


def test_an_amd_part_is_named_as_a_gpu_and_read_without_nvml() -> None:
    for name, memory_gib in (("MI300X", 192), ("mi325", 256)):
        gpu = load_study(QUICKSTART, [f"gpu={name}"]).gpu
        assert (gpu.architecture, gpu.kind, gpu.has_fp8) == ("cdna3", "GPU", True)
        assert round(gpu.memory_bytes / 2**30) == memory_gib
        assert not gpu.has_nvml and not gpu.runs_marlin and gpu.nvlink


def test_the_plan_spans_the_board_and_offers_no_marlin_format() -> None:
    study = load_study(QUICKSTART, ["gpu=mi300x"])
    lay = layout(
        study.gpu, study.model, study.engine, Shape(8), gpus=8, lengths=plan_lengths(study)
    )
    assert lay.excluded is None and lay.fits
    assert [w.quantization for w in lay.weights] == ["bf16", "fp8"]


def test_the_simulator_diagnoses_an_mi300x_from_vllms_metrics_alone(tmp_path: Path) -> None:
    study = load_study(QUICKSTART, ["gpu=mi300x"])
    findings = measure_and_diagnose(study, tmp_path, knob_catalogue(), LogProgress())
    saturated = max(findings.result.points, key=lambda p: p.rate_rps).point
    assert saturated.signals.gpu_util_pct is None and saturated.signals.dram_bw_util_pct is None
    assert findings.diagnosis.constraint is not None
