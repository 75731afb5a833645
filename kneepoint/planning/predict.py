"""The simulator's knee and SLO capacity for one layout, at the study's traffic and SLO: a
knee search on the virtual clock, as the tune's baseline runs it but with shorter points (a
plan ranks layouts before any GPU is rented; the tune measures the one chosen).
"""

from __future__ import annotations

from kneepoint.config import workload_trace
from kneepoint.load import PointSize, output_per_request, point_seed
from kneepoint.measure import knee_search
from kneepoint.records import (
    KNEE_REL_TOL,
    EngineConfig,
    GpuSpec,
    LayoutPrediction,
    LoadPoint,
    StudySpec,
)
from kneepoint.sim import simulate_load_point

POINT_SECONDS = 10.0
"""Arrivals per point (stretched to what the workload needs to settle, as the tune's are)."""


def study_on(study: StudySpec, gpu: GpuSpec, config: EngineConfig) -> StudySpec:
    """The study on another GPU and config. A calibration fitted on another GPU is dropped:
    its efficiencies describe that GPU's kernels, not this one's."""
    calibration = study.calibration
    if calibration is not None and calibration.gpu != gpu.name:
        calibration = None
    return study.model_copy(update={"gpu": gpu, "engine": config, "calibration": calibration})


def predict(study: StudySpec, usd_per_gpu_hour: float | None, start_rps: float) -> LayoutPrediction:
    """Knee search from ``start_rps`` on ``study``'s GPU and engine config."""
    size = PointSize.for_study(study, POINT_SECONDS)
    trace = workload_trace(study.workload)

    def probe(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
        return simulate_load_point(
            study,
            rate,
            size.requests(rate),
            study.engine,
            point_seed(study.workload.seed, repeat, attempt),
            trace=trace,
            warmup_s=size.warmup_s,
        ).point

    result = knee_search(probe, study.engine, study.slo, start_rps, rel_tol=KNEE_REL_TOL)
    tokens = output_per_request(result, study.workload)
    gpus = study.engine.gpu_count
    return LayoutPrediction(
        knee_rps=result.knee_rps,
        capacity_rps=result.capacity_rps,
        output_tokens_per_request=tokens,
        usd_per_hour=None if usd_per_gpu_hour is None else usd_per_gpu_hour * gpus,
    )
