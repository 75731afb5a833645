"""A calibration from recorded real sweeps of one (GPU, model, vLLM version): the roofline's
constants fitted to the engine's own step times, the compute/memory split and the engine
core's CPU work per running sequence to whole replays, then the API server's fixed share of
latency read from time to first token at the lowest rates, where no queue adds to it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.calibration.dynamics import first_repeat, refine, replay_error
from kneepoint.calibration.fit import (
    StepSample,
    fit_steps,
    replayed_samples,
    step_error,
    step_samples,
)
from kneepoint.calibration.held_out import score
from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.calibration.replay import replay_point
from kneepoint.config import ConfigError, Problem
from kneepoint.records import Calibration, Efficiency, SweepPoint

REPLAY_ROUNDS = 2


@dataclass(frozen=True)
class TtftCheck:
    """TTFT p50 at a recording's lowest passing rate: measured, and simulated with the
    fitted constants before the API server's latency is added."""

    label: str
    real_ms: float
    engine_ms: float


@dataclass(frozen=True)
class Fitted:
    calibration: Calibration
    samples: list[StepSample]
    ttft: list[TtftCheck]


def _ttft_p50(point: SweepPoint) -> float:
    return max(d["ttft"].p50_ms for d in point.point.dists.values())


def _lowest_passing(recorded: RecordedSweep) -> SweepPoint | None:
    passing = [p for p in recorded.result.points if p.passed]
    return min(passing, key=lambda p: (p.rate_rps, p.repeat)) if passing else None


def ttft_checks(recordings: Sequence[RecordedSweep], efficiency: Efficiency) -> list[TtftCheck]:
    checks = []
    for rec in recordings:
        low = _lowest_passing(rec)
        if low is not None:
            simulated = replay_point(rec, low, efficiency)
            checks.append(
                TtftCheck(
                    f"{rec.name} @ {low.rate_rps:g} req/s", _ttft_p50(low), _ttft_p50(simulated)
                )
            )
    return checks


def _one_setting(recordings: Sequence[RecordedSweep]) -> tuple[str, str, str | None]:
    found = {(r.study.gpu.name, r.study.model.name) for r in recordings}
    if len(found) != 1:
        listed = "; ".join(f"{g} / {m}" for g, m in sorted(found))
        raise ConfigError(
            [
                Problem(
                    "kneepoint calibrate",
                    None,
                    (),
                    f"recordings of one GPU and model only, not several ({listed})",
                )
            ]
        )
    (gpu, model) = found.pop()
    versions = {
        r.study.backend.stated_vllm_version
        for r in recordings
        if r.study.backend.launch_command is not None
    }
    return gpu, model, versions.pop() if len(versions) == 1 else None


def _with_frontend(
    recordings: Sequence[RecordedSweep], fitted: Efficiency
) -> tuple[Efficiency, list[TtftCheck], float | None]:
    """``fitted`` with the API server's latency read off TTFT at the lowest passing rates
    (the median gap between measured and engine TTFT), the checks, and their mean error."""
    checks = ttft_checks(recordings, fitted.model_copy(update={"frontend_latency_s": 0.0}))
    gaps = [c.real_ms - c.engine_ms for c in checks]
    frontend_ms = max(0.0, statistics.median(gaps)) if gaps else 0.0
    error = statistics.fmean(abs(g - frontend_ms) for g in gaps) if gaps else None
    return fitted.model_copy(update={"frontend_latency_s": frontend_ms / 1e3}), checks, error


def calibrate(
    recordings: Sequence[RecordedSweep],
    start: Efficiency | None = None,
    held_out: Sequence[RecordedSweep] = (),
) -> Fitted:
    """Fit the constants to ``recordings`` (all of one GPU and model). Recordings
    ``held_out`` (of the same GPU and model) are not fitted to: they, and the recordings
    fitted to, are then replayed with and without the fit (``Calibration.scores``)."""
    gpu, model, version = _one_setting([*recordings, *held_out])
    samples = step_samples(recordings)
    if not samples:
        raise ConfigError(
            [
                Problem(
                    "kneepoint calibrate",
                    None,
                    (),
                    "no recorded point shows "
                    "the engine stepping back to back (vLLM's step-rate metrics "
                    "with at least two sequences running)",
                )
            ]
        )
    first = (start or Efficiency()).model_copy(update={"frontend_latency_s": 0.0})
    fitted = fit_steps(samples, first)
    for _ in range(REPLAY_ROUNDS):
        # The simulator's own steps at each point, under the constants fitted so far, then
        # refit to them: the step mix moves with the step times, so a few rounds settle it.
        samples = replayed_samples(recordings, fitted)
        fitted = fit_steps(samples, fitted, restarts=0)  # it starts near: one search
    # With the API server's latency in place, the compute/memory split and the engine core's
    # CPU work per sequence on whole replays, from whichever replays the recordings better:
    # the step fit, or the constants it started from (a step fit can price the average step
    # right and the knee wrong); the latency is then read again off the refined engine.
    firsts = [first_repeat(r) for r in recordings]
    origins = [_with_frontend(recordings, e)[0] for e in (fitted, first)]
    origin = min(origins, key=lambda e: replay_error(firsts, e))
    efficiency, checks, error = _with_frontend(recordings, refine(recordings, origin))
    calibration = Calibration(
        gpu=gpu,
        model=model,
        vllm_version=version,
        efficiency=efficiency,
        fitted_from=tuple(str(r.source) for r in recordings),
        step_error_rel=round(step_error(efficiency, samples), 4),
        ttft_error_ms=None if error is None else round(error, 2),
    )
    if held_out:
        scores = [*score(recordings, efficiency, fitted=True),
                  *score(held_out, efficiency, fitted=False)]  # fmt: skip
        calibration = calibration.model_copy(update={"scores": tuple(scores)})
    return Fitted(calibration, samples, checks)
