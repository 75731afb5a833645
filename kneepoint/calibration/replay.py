"""The simulator replaying a recorded sweep: the same configuration, rates and repeats, the same
workload draws (seed per repeat) and load-point sizes the recording was measured with, on the
virtual clock. What the real engine and the simulator then say can be compared point by point.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.config import workload_trace
from kneepoint.load import PointSize, interpolate_capacity, mean_interval, rate_salt, slo_margin
from kneepoint.physics import BatchShape
from kneepoint.records import (
    Efficiency,
    EngineConfig,
    StudySpec,
    SweepPoint,
    SweepResult,
    TraceEntry,
)
from kneepoint.sim import SimEngine, SimLoadPoint, acceptance_of, simulate_load_point


def replay(
    recorded: RecordedSweep,
    efficiency: Efficiency | None = None,
    config: EngineConfig | None = None,
) -> SweepResult:
    """The recording's points as the simulator measures them (``config``: another engine
    config at the same rates, e.g. to price a knob change the real engine never ran)."""
    config = config or recorded.result.config
    study = recorded.simulated()
    replayed = _replayed(recorded, efficiency, config)
    points = [_as_recorded(real, sim, study) for real, sim in replayed]
    return summarise(points, config)


def replay_steps(
    recorded: RecordedSweep, efficiency: Efficiency | None = None
) -> list[tuple[SweepPoint, list[BatchShape]]]:
    """Every recorded point with the steps the simulator ran in its stable window (their
    shapes, in order): what the real engine's step-rate metrics averaged over, as the
    simulator schedules it."""
    out = []
    for real, sim in _replayed(recorded, efficiency, recorded.result.config):
        start, end = sim.window_s
        out.append((real, [s.shape for s in sim.load.run.steps if start <= s.start_s < end]))
    return out


def _replayed(
    recorded: RecordedSweep, efficiency: Efficiency | None, config: EngineConfig
) -> Iterator[tuple[SweepPoint, SimLoadPoint]]:
    study = recorded.simulated()
    trace = workload_trace(study.workload)
    for repeat in sorted({p.repeat for p in recorded.result.points}):
        # One engine per repeat, the points in the order they were measured: the real
        # server kept its prefix cache from point to point, and so does this one.
        engine = SimEngine(
            study.gpu,
            study.model,
            config,
            efficiency or study.efficiency,
            acceptance=acceptance_of(study.workload),
        )
        for real in [p for p in recorded.result.points if p.repeat == repeat]:
            yield real, _simulate(recorded, real, efficiency, config=config, trace=trace, on=engine)


def replay_point(
    recorded: RecordedSweep,
    real: SweepPoint,
    efficiency: Efficiency | None = None,
    *,
    on: SimEngine | None = None,
) -> SweepPoint:
    """One recorded point (its rate and repeat) as the simulator measures it: on a fresh
    engine, or ``on`` one that served the points measured before it. The prompts are the
    ones the recording sent: the same at every rate (older recordings) or salted by the
    rate (``RecordedSweep.prompts_salted``)."""
    simulated = _simulate(recorded, real, efficiency, config=recorded.result.config, on=on)
    return _as_recorded(real, simulated, recorded.study)


def _as_recorded(real: SweepPoint, simulated: SimLoadPoint, study: StudySpec) -> SweepPoint:
    margin = slo_margin(simulated.point, study.slo)
    return SweepPoint(
        rate_rps=real.rate_rps,
        repeat=real.repeat,
        arm=real.arm,
        margin=margin,
        point=simulated.point,
    )


def _simulate(
    recorded: RecordedSweep,
    real: SweepPoint,
    efficiency: Efficiency | None,
    *,
    config: EngineConfig,
    trace: Sequence[TraceEntry] | None = None,
    on: SimEngine | None = None,
) -> SimLoadPoint:
    study = recorded.simulated()
    size = PointSize.for_study(study, study.tuning.screen_seconds)
    salt = rate_salt(real.rate_rps) if recorded.prompts_salted else ""  # as the prober did
    return simulate_load_point(
        study,
        real.rate_rps,
        size.requests(real.rate_rps),
        config,
        study.workload.seed + real.repeat,
        trace=trace,
        warmup_s=size.warmup_s,
        efficiency=efficiency,
        on=on,
        salt=salt,
    )


def summarise(points: list[SweepPoint], config: EngineConfig) -> SweepResult:
    """Capacity per repeat from the points' margins, and their mean with its interval."""
    by_repeat = []
    for repeat in sorted({p.repeat for p in points}):
        margins = [(p.rate_rps, p.margin) for p in points if p.repeat == repeat and p.counted]
        by_repeat.append(interpolate_capacity(margins) or 0.0)
    mean, low, high = mean_interval(by_repeat) if any(by_repeat) else (None, None, None)
    passing = [p.rate_rps for p in points if p.margin <= 1.0]
    return SweepResult(
        kind="knee",
        config=config,
        points=tuple(points),
        capacity_rps=mean,
        capacity_low_rps=low,
        capacity_high_rps=high,
        capacity_by_repeat=tuple(by_repeat),
        knee_rps=max(passing) if passing else None,
    )
