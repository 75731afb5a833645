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

import numpy as np

from benchmarks.published_campaign import Run, load_workloads, simulate, study_of
from kneepoint.calibration.fit import BOUNDS, StepSample, nelder_mead, step_error
from kneepoint.physics import resolve_engine
from kneepoint.records import Efficiency

EXTRA_BOUNDS = {
    "request_overhead_s": (0.0, 200e-6),
    "attention_overhead_s": (0.0, 5e-6),
    "allreduce_latency_s": (0.0, 50e-6),
    "step_overhead_s": (0.0, 2e-3),
}
"""Ranges of the constants ``kneepoint calibrate`` does not fit (calibration.fit.BOUNDS has
the rest)."""
STEPS_PER_STAGE = 64
"""Steps priced per stage, spread over their sizes (``calibration.fit._spread``)."""


def stage_samples(runs: Sequence[Run], start: Efficiency) -> list[StepSample]:
    """Each stage's steps as simulated with ``start``, against its measured mean gap."""
    workloads = load_workloads()
    samples = []
    for run in runs:
        sent = workloads[run.workload]
        study = study_of(run, sent)
        engine = resolve_engine(study.engine, study.gpu, study.model)
        steps: list[list] = []
        simulate(study, run, start, steps)
        for stage, shapes in zip(run.stages, steps, strict=True):
            gap_ms = stage.measured["itl_mean_ms"] * (stage.client_output_tokens() - 1.0)
            gap_ms /= sent.output_tokens - 1
            chosen = sorted(shapes, key=lambda s: (s.new_tokens, s.kv_tokens))
            spread = [
                chosen[int((i + 0.5) * len(chosen) / STEPS_PER_STAGE)]
                for i in range(min(STEPS_PER_STAGE, len(chosen)))
            ]
            samples.append(
                StepSample(
                    f"{run.label} @ {stage.rate_rps:g}",
                    tuple(spread),
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

    def constants(x: np.ndarray) -> Efficiency:
        values = {
            f: bounds[f][0] + (bounds[f][1] - bounds[f][0]) * float(v)
            for f, v in zip(fields, np.clip(x, 0.0, 1.0), strict=True)
        }
        return start.model_copy(update=values)

    first = np.array(
        [(getattr(start, f) - bounds[f][0]) / (bounds[f][1] - bounds[f][0]) for f in fields]
    )
    best = nelder_mead(lambda x: step_error(constants(x), samples), np.clip(first, 0.0, 1.0))
    best = nelder_mead(lambda x: step_error(constants(x), samples), best)
    return constants(best)
