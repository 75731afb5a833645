"""Constants fitted to a published campaign's runs, for scoring on the runs they were not
fitted on (benchmarks/published_fidelity.py ``--fit``).

Each training run is simulated once with the starting constants; each stage's steps that gave
some request a token are priced again under candidate constants, and the constants chosen
make the mean price match the stage's measured mean token gap (the campaign's ITL with the
output the server generated, not the client's count), in squared log error, by the Nelder-Mead
search ``kneepoint calibrate`` uses.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.published_campaign import Run, load_workloads, simulate, study_of
from kneepoint.calibration.fit import BOUNDS, StepSample, fit_steps, spread
from kneepoint.physics import BatchShape, resolve_engine
from kneepoint.records import Efficiency

EXTRA_BOUNDS = {
    "request_overhead_s": (0.0, 200e-6),
    "allreduce_latency_s": (0.0, 50e-6),
    "step_overhead_s": (0.0, 2e-3),
}
"""Ranges of the constants ``kneepoint calibrate`` does not fit (calibration.fit.BOUNDS has
the rest)."""
STEPS_PER_STAGE = 64
"""Steps priced per stage, spread over their sizes (``calibration.fit.spread``)."""


def stage_samples(runs: Sequence[Run], start: Efficiency) -> list[StepSample]:
    """Each stage's steps as simulated with ``start``, against its measured mean gap."""
    workloads = load_workloads()
    samples = []
    for run in runs:
        sent = workloads[run.workload]
        study = study_of(run, sent)
        engine = resolve_engine(study.engine, study.gpu, study.model)
        steps: list[list[BatchShape]] = []
        simulate(study, run, start, steps)
        for stage, shapes in zip(run.stages, steps, strict=True):
            gap_ms = stage.measured["itl_mean_ms"] * (stage.client_output_tokens() - 1.0)
            gap_ms /= sent.output_tokens - 1
            samples.append(
                StepSample(
                    f"{run.label} @ {stage.rate_rps:g}",
                    spread(shapes, STEPS_PER_STAGE),
                    gap_ms / 1e3,
                    study.gpu,
                    study.model,
                    engine,
                )
            )
    return samples


def fit_constants(runs: Sequence[Run], start: Efficiency, fields: Sequence[str]) -> Efficiency:
    """``fields`` of ``start`` refitted to ``runs``' stages."""
    bounds = {**BOUNDS, **EXTRA_BOUNDS}
    unknown = [f for f in fields if f not in bounds]
    if unknown:
        raise SystemExit(f"--fit: no range for {', '.join(unknown)} (known: {', '.join(bounds)})")
    samples = stage_samples(runs, start)
    return fit_steps(samples, start, restarts=1, fields=fields, bounds=bounds)
