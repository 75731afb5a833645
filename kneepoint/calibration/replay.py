"""The simulator replaying a recorded sweep: the same configuration, rates and repeats, the same
workload draws (seed per repeat) and load-point sizes the recording was measured with, on the
virtual clock. What the real engine and the simulator then say can be compared point by point.
"""

from __future__ import annotations

from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.config.trace import workload_trace
from kneepoint.load.capacity import interpolate_capacity, mean_interval, slo_margin
from kneepoint.load.size import PointSize
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig
from kneepoint.records.sweep import SweepPoint, SweepResult
from kneepoint.sim.loadpoint import simulate_load_point


def replay(
    recorded: RecordedSweep, efficiency: Efficiency | None = None,
    config: EngineConfig | None = None,
) -> SweepResult:  # fmt: skip
    """The recording's points as the simulator measures them (``config``: another engine
    config at the same rates, e.g. to price a knob change the real engine never ran)."""
    study = recorded.simulated()
    config = config or recorded.result.config
    size = PointSize.for_study(study, study.tuning.screen_seconds)
    trace = workload_trace(study.workload)
    points = []
    for real in sorted(recorded.result.points, key=lambda p: (p.repeat, p.rate_rps)):
        simulated = simulate_load_point(
            study, real.rate_rps, size.requests(real.rate_rps), config,
            study.workload.seed + real.repeat, trace=trace, warmup_s=size.warmup_s,
            efficiency=efficiency,
        )  # fmt: skip
        points.append(SweepPoint(rate_rps=real.rate_rps, repeat=real.repeat, arm=real.arm,
                                 margin=slo_margin(simulated.point, study.slo),
                                 point=simulated.point))  # fmt: skip
    return summarise(points, config)


def summarise(points: list[SweepPoint], config: EngineConfig) -> SweepResult:
    """Capacity per repeat from the points' margins, and their mean with its interval."""
    by_repeat = []
    for repeat in sorted({p.repeat for p in points}):
        margins = [(p.rate_rps, p.margin) for p in points if p.repeat == repeat and p.point.valid]
        by_repeat.append(interpolate_capacity(margins) or 0.0)
    mean, low, high = mean_interval(by_repeat) if any(by_repeat) else (None, None, None)
    passing = [p.rate_rps for p in points if p.margin <= 1.0]
    return SweepResult(kind="knee", config=config, points=tuple(points), capacity_rps=mean,
                       capacity_low_rps=low, capacity_high_rps=high,
                       capacity_by_repeat=tuple(by_repeat),
                       knee_rps=max(passing) if passing else None)  # fmt: skip
