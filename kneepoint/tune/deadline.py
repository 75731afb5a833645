"""Whether a new run's deadline leaves time for its baseline, checked before any server starts.

A baseline that cannot finish before the deadline spends its device time for nothing: the run
would stop with no capacity measured. So a deadline already past, or closer than the least
time one baseline can take, is refused as bad input. The least time is a floor, not a guess at
the real length: two server starts (the knee search's and the repeats'), the fewest points a
knee search measures, and the repeats around the knee, each point at least its span of
arrivals.
"""

from __future__ import annotations

from datetime import datetime

from kneepoint.load import VALIDATE_FRACTIONS, PointSize
from kneepoint.physics import UnmodeledSettingError, resolve_engine, startup_seconds
from kneepoint.records import StudySpec

KNEE_MIN_POINTS = 2
"""A knee search measures at least one rate that meets the SLO and one that does not."""
SIM_SERVER_START_S = 1.0
"""`kneepoint sim serve` answers /health about a second after launch (tests/test_backends.py
starts it through the launcher in 1.5 s, measurement included)."""
VIRTUAL_SPEED_BOUND = 1000.0
"""Simulated seconds per wall second, above any the virtual clock reaches: benchmarks/
sim_speed.py measured 161-474x, so dividing by this gives a floor on the wall time."""


def _point_s(study: StudySpec, seconds: float) -> float:
    size = PointSize.for_study(study, seconds)
    return max(size.seconds, size.settle_s)


def baseline_floor_s(study: StudySpec) -> float:
    """The least wall time one baseline of ``study`` can take, in seconds."""
    tuning = study.tuning
    points = KNEE_MIN_POINTS * _point_s(study, tuning.screen_seconds)
    repeats = tuning.validate_repeats * len(VALIDATE_FRACTIONS)
    points += repeats * _point_s(study, tuning.validate_seconds)
    backend = study.backend
    if backend.simulated and not backend.virtual_clock:
        return 2 * SIM_SERVER_START_S + points
    try:
        engine = resolve_engine(study.engine, study.gpu, study.model)
        start = startup_seconds(study.model, engine)
    except UnmodeledSettingError:
        start = 0.0
    if backend.virtual_clock:
        return (2 * start + points) / VIRTUAL_SPEED_BOUND
    return 2 * start + points


def deadline_problem(study: StudySpec, now: datetime) -> str | None:
    """Why a run started ``now`` cannot meet its deadline (None: it can, or has none)."""
    deadline = study.budget.deadline_after(now)
    if deadline is None:
        return None
    left = (deadline - now).total_seconds()
    if left <= 0:
        return (
            f"{deadline.isoformat(timespec='minutes')} is already past "
            f"(now {now.isoformat(timespec='minutes')})"
        )
    floor = baseline_floor_s(study)
    if left < floor:
        return (
            f"{deadline.isoformat(timespec='minutes')} leaves {left / 60:.1f} min, less "
            f"than one baseline needs (at least {floor / 60:.1f} min)"
        )
    return None
