"""What a diagnosis reads from a sweep: the two points at the knee, and the server's measured
response between them.

The evidence comes from the first rate that failed the SLO and the highest that met it, not
from a rate far past the knee: there every server queues, every cap is full and the queue says
only that the server is overloaded. Whether a full cap or a waiting queue *binds* depends on
what the server does with a bigger batch, and its own points say that: how its step time
(vLLM's step rate) grew with the tokens each step carried. On the real H100 recordings
(tests/fixtures/real) step time grew as tokens^1.2, ^1.0 and ^1.1 from the last passing rate
to the first failing one (base, defaults, fp8): a bigger batch bought no throughput there, and
raising max_num_seqs to 1024 measured +1.3%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kneepoint.records import (
    AcceptanceProbe,
    Efficiency,
    EngineConfig,
    GpuSpec,
    LoadPoint,
    ModelSpec,
    Observation,
    ServerResponse,
    Slo,
    StudySpec,
    SweepPoint,
    SweepResult,
    Workload,
)

MIN_RUNNING = 2.0
"""Below this many running sequences the engine idles between steps, so its step rate is not
its step time (the same guard as the calibration's step fit)."""
MIN_SPREAD = 0.1
"""Least difference in log tokens per step that a slope is read over: two points whose steps
carry within 10% of the same tokens say nothing about the slope but their noise (the real
H100 repeats spread ~3% in step time at one rate)."""


def knee_points(result: SweepResult) -> tuple[LoadPoint | None, LoadPoint | None]:
    """(the lowest valid rate at or past the capacity that failed its SLO, the highest valid
    rate that met it). Either may be None."""
    valid = sorted((p for p in result.points if p.counted), key=lambda p: p.rate_rps)
    capacity = result.capacity_rps or 0.0
    failing = [p for p in valid if p.margin > 1.0 and p.rate_rps >= capacity]
    passing = [p for p in valid if p.margin <= 1.0]
    below_failing = [p for p in passing if not failing or p.rate_rps < failing[0].rate_rps]
    return (
        failing[0].point if failing else None,
        below_failing[-1].point if below_failing else None,
    )


def _steps(point: LoadPoint) -> tuple[float, float, float] | None:
    """(tokens per step, step seconds, running sequences) where the engine stepped back to
    back."""
    s = point.signals
    running = s.running_mean or 0.0
    if not s.steps_per_s or not s.tokens_per_step_mean or running < MIN_RUNNING:
        return None
    return s.tokens_per_step_mean, 1.0 / s.steps_per_s, running


def measured_response(points: Sequence[SweepPoint], high: LoadPoint) -> ServerResponse | None:
    """Step time against tokens per step from ``high`` down to the nearest lower rate whose
    steps carried at least ``MIN_SPREAD`` fewer tokens (log), or None where the points do
    not show it (no step-rate metrics, or steps that never grew)."""
    top = _steps(high)
    if top is None:
        return None
    lower = sorted(
        (p for p in points if p.counted and p.rate_rps < high.rate_rps), key=lambda p: -p.rate_rps
    )
    for candidate in lower:
        low = _steps(candidate.point)
        if low is None or math.log(top[0] / low[0]) < MIN_SPREAD:
            continue
        elasticity = math.log(top[1] / low[1]) / math.log(top[0] / low[0])
        return ServerResponse(
            low_rate_rps=candidate.rate_rps,
            high_rate_rps=high.rate_rps,
            low_tokens_per_step=round(low[0], 1),
            high_tokens_per_step=round(top[0], 1),
            low_step_ms=round(low[1] * 1e3, 3),
            high_step_ms=round(top[1] * 1e3, 3),
            elasticity=round(elasticity, 3),
            low_running=round(low[2], 1),
            high_running=round(top[2], 1),
        )
    return None


def observe(
    result: SweepResult,
    *,
    gpu: GpuSpec,
    model: ModelSpec,
    engine: EngineConfig,
    workload: Workload | None = None,
    efficiency: Efficiency | None = None,
    slo: Slo | None = None,
    acceptance: AcceptanceProbe | None = None,
) -> Observation:
    """The observation a diagnosis of ``result`` reads. Where no rate failed (the sweep never
    saw the wall) the highest rate counted stands in for the saturated point, or, where no
    point could be counted, the highest measured (whose verdict then says why)."""
    saturated, below = knee_points(result)
    if saturated is None:
        counted = [p for p in result.points if p.counted]
        saturated = max(counted or result.points, key=lambda p: p.rate_rps).point
    return Observation(
        saturated=saturated,
        below=below,
        response=measured_response(result.points, saturated),
        gpu=gpu,
        model=model,
        engine=engine,
        workload=workload,
        efficiency=efficiency,
        slo=slo,
        acceptance=acceptance,
    )


def observe_study(
    study: StudySpec,
    config: EngineConfig,
    result: SweepResult,
    acceptance: AcceptanceProbe | None = None,
) -> Observation:
    """``observe`` for a sweep of ``config`` under the study's GPU, model, workload and
    efficiency (``acceptance``: the run's acceptance probe): what the loop, its proposers
    and ``kneepoint diagnose`` all read."""
    return observe(
        result,
        gpu=study.gpu,
        model=study.model,
        engine=config,
        workload=study.workload,
        efficiency=study.efficiency,
        slo=study.slo,
        acceptance=acceptance,
    )
