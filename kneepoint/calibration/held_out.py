"""A calibration scored on recordings it was not fitted to: what it is worth on the next
configuration, not on the ones it saw. Each recording is replayed with the built-in constants
and with the fitted ones, its SLO capacity and step times set beside what the real engine
measured; the recordings fitted to are scored the same way, so that in-sample and
out-of-sample figures sit side by side (``kneepoint calibrate --hold-out``)."""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.calibration.fit import step_error, step_samples
from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.calibration.replay import replay
from kneepoint.records import Efficiency, ReplayScore


def score(
    recordings: Sequence[RecordedSweep], efficiency: Efficiency, *, fitted: bool
) -> list[ReplayScore]:
    """Each recording replayed with the built-in constants and with ``efficiency``."""
    return [_scored(rec, efficiency, fitted) for rec in recordings]


def _scored(rec: RecordedSweep, efficiency: Efficiency, fitted: bool) -> ReplayScore:
    real = rec.result.capacity_rps
    samples = step_samples([rec])

    def capacity_error(constants: Efficiency) -> float | None:
        simulated = replay(rec, constants).capacity_rps
        return simulated / real - 1.0 if real and simulated else None

    def steps(constants: Efficiency) -> float | None:
        return step_error(constants, samples) if samples else None

    built_in = Efficiency()
    return ReplayScore(
        recording=f"{rec.study_folder.name}/{rec.name}",
        fitted=fitted,
        capacity_rps=real,
        uncalibrated_error_rel=capacity_error(built_in),
        calibrated_error_rel=capacity_error(efficiency),
        uncalibrated_step_error_rel=steps(built_in),
        calibrated_step_error_rel=steps(efficiency),
    )
