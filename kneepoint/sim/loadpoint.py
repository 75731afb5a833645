"""A study's load points and SLO capacity on the virtual clock, with ground truth attached.

What the scenario tests and benchmarks use to ask "where is this configuration's knee, and
which constraint binds there?" without any HTTP in the way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.config import workload_trace
from kneepoint.load import (
    Capacity,
    Score,
    Trust,
    Verdict,
    counted,
    find_capacity,
    load_point,
    plan_requests,
    score,
    window_bounds,
)
from kneepoint.records import Efficiency, EngineConfig, LoadPoint, StudySpec, TraceEntry
from kneepoint.sim.attribution import Attribution
from kneepoint.sim.deployment import Serving, serving
from kneepoint.sim.drafting import acceptance_of
from kneepoint.sim.signals import virtual_signals
from kneepoint.sim.virtual import VirtualLoad, run_plan

# A request still unfinished this long after the last send counts as timed out.
_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class SimLoadPoint:
    """One offered rate on one configuration: the client's score and the engine's truth."""

    rate_rps: float
    score: Score
    truth: Attribution
    """Ground truth over the stable window."""
    preemptions: int
    load: VirtualLoad
    point: LoadPoint
    """The same load point as a real server's would be recorded (no ground truth in it)."""
    window_s: tuple[float, float]
    """The stable window on the engine's clock: the steps ``point``'s signals come from."""


def simulate_load_point(
    study: StudySpec,
    rate_rps: float,
    num_requests: int,
    engine: EngineConfig | None = None,
    seed: int | None = None,
    *,
    trace: Sequence[TraceEntry] | None = None,
    warmup_s: float = 0.0,
    efficiency: Efficiency | None = None,
    on: Serving | None = None,
    salt: str = "",
    trust: Trust | None = None,
) -> SimLoadPoint:
    """Run ``num_requests`` of the study's workload at ``rate_rps`` on a fresh engine
    (``trace``: the workload's trace, already read; None reads it; ``warmup_s``: the least
    time cut from the start of the stable window; ``efficiency``: the roofline's constants,
    by default the study's calibration's, else the built-in ones; ``on``: an engine to go on
    with instead, its prefix cache as earlier points left it, as a live server's is;
    ``salt``: the plan's, as ``plan_requests`` takes it; ``trust``: the rules the point is
    judged by, the study's when None)."""
    sim = on or serving(
        study.gpu,
        study.model,
        engine or study.engine,
        efficiency or study.efficiency,
        acceptance=acceptance_of(study.workload),
    )
    if trace is None:
        trace = workload_trace(study.workload)
    plan = plan_requests(
        study.workload,
        rate_rps,
        num_requests=num_requests,
        seed=seed,
        trace=trace,
        vocab_size=study.model.vocab_size,
        salt=salt,
    )
    began = sim.now_s  # records count from the plan's start; steps from the engine's
    client = study.workload.client
    load = run_plan(
        sim,
        plan,
        timeout_s=_TIMEOUT_S,
        request_timeout_s=client.request_timeout_s,
        max_concurrency=client.max_concurrency,
    )
    trust = trust or Trust.of(study.slo, study.measurement)
    result = score(counted(load.records, trust.latency_from), study.slo, warmup_s=warmup_s)
    start, end = window_bounds(load.records, trim=0.1, warmup_s=warmup_s)
    start, end = start + began, end + began
    finished = [req for _, req in load.run.submitted if req.finish_s is not None]
    signals = virtual_signals(sim, load.run.steps, start, end, finished)
    return SimLoadPoint(
        rate_rps=rate_rps,
        score=result,
        truth=load.truth(start, end),
        preemptions=sum(step.preempted for step in load.run.steps),
        load=load,
        point=load_point(
            rate_rps,
            load.records,
            study.slo,
            signals=signals,
            scored=result,
            warmup_s=warmup_s,
            trust=trust,
        ),
        window_s=(start, end),
    )


def simulate_capacity(
    study: StudySpec,
    num_requests: int,
    start_rps: float,
    engine: EngineConfig | None = None,
    rel_tol: float = 0.05,
) -> tuple[Capacity, SimLoadPoint | None]:
    """The SLO capacity of a configuration, and the load point at it (None if nothing passed)."""
    points: dict[float, SimLoadPoint] = {}

    def passes(rate: float) -> Verdict:
        points[rate] = simulate_load_point(study, rate, num_requests, engine)
        return "pass" if points[rate].point.meets_slo else "fail"

    capacity = find_capacity(passes, start_rps, rel_tol=rel_tol)
    return capacity, points.get(capacity.passing_rps)
