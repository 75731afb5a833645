"""The study's knee search: the one ``tune``'s baseline, ``kneepoint sweep`` and ``kneepoint
diagnose`` all run (the start rate, tolerance, retakes and lowest rate the study names), so
that the same measured points give the same SLO capacity whichever command measured them."""

from __future__ import annotations

import time

from kneepoint.measure.sweep import knee_search
from kneepoint.measure.sweep_run import Clock
from kneepoint.probes.backends import Prober
from kneepoint.records import EngineConfig, StudySpec, SweepResult


def study_knee_search(
    probe: Prober,
    study: StudySpec,
    config: EngineConfig,
    *,
    start_rps: float | None = None,
    time_cap_s: float | None = None,
    clock: Clock = time.monotonic,
) -> SweepResult:
    """``config``'s knee on ``study``'s terms, from ``start_rps`` (else the study's
    ``tuning.start_rps``)."""
    spec = study.measurement
    return knee_search(
        probe,
        config,
        study.slo,
        start_rps or study.tuning.start_rps,
        rel_tol=spec.knee_tolerance,
        time_cap_s=time_cap_s,
        clock=clock,
        retakes=spec.retakes,
        lowest_rps=spec.lowest_rps,
        max_rps=study.tuning.max_rate_rps,
    )
