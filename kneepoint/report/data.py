"""What a report reads from a run folder: the study, the state its ledger rebuilds, the curves
of the starting configuration and the winner, and the overall gain with its interval."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from kneepoint.load import rules
from kneepoint.policies.diagnosis import knee_points
from kneepoint.policies.judge import judge
from kneepoint.records import (
    HostInfo,
    Judgement,
    LoadPoint,
    RunStarted,
    StudySpec,
    SweepPoint,
    SweepResult,
)
from kneepoint.run import RunFolder, RunState, TrialState, serve_command


@dataclass(frozen=True)
class CurvePoint:
    """One offered rate of a curve, summarised over its repeats."""

    rate_rps: float
    values_ms: dict[str, float]
    """Per SLO metric label (``chat ttft_p99``): the mean over repeats."""
    goodput_rps: float
    repeats: int
    misses: tuple[str, ...]
    """Each repeat that missed the SLO at this rate, with what it missed (``r1: chat
    itl_p95 53 ms > 50 ms``)."""
    thin: dict[str, int] = field(default_factory=dict)
    """Per SLO metric label whose percentile some repeat read off too few samples to resolve
    it (``Dist.resolves``): the fewest samples a repeat had."""
    intervals_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per SLO metric label: a bootstrap interval of the mean over repeats, where the run kept
    the point's requests (``kneepoint.report.intervals``)."""
    goodput_from_schedule_rps: float | None = None
    """Where latency counted from the capped client's slot: the goodput counted from the
    schedule, mean over repeats (``MeasurementSpec.latency_from``)."""

    @property
    def meets_slo(self) -> bool:
        """Every repeat met the SLO at this rate."""
        return not self.misses


@dataclass(frozen=True)
class Curve:
    label: str
    result: SweepResult
    points: tuple[CurvePoint, ...]


@dataclass(frozen=True)
class ReportData:
    folder: RunFolder
    study: StudySpec
    state: RunState
    start: Curve | None
    final: Curve | None
    """The incumbent at the end, when it is not the starting configuration."""
    overall: Judgement | None
    command: str
    host: HostInfo | None = None
    """The machine the run started on, from its ledger."""

    @property
    def trials(self) -> list[TrialState]:
        return [self.state.trials[n] for n in sorted(self.state.trials)]

    def knee_point(self, curve: Curve) -> LoadPoint | None:
        saturated, _ = knee_points(curve.result)
        return saturated


def slo_metrics(study: StudySpec) -> list[tuple[str, str, int, float]]:
    """(label, metric, percentile, limit ms) for every class's SLO limits."""
    if study.slo is None:
        return []
    found = []
    for name in study.workload.class_names():
        limits = study.slo.for_class(name)
        for (metric, pct), limit in (limits.limits_ms() if limits else {}).items():
            found.append((f"{name} {metric}_p{pct}", metric, pct, limit))
    return found


def slo_lines(study: StudySpec) -> list[str]:
    """Each class's limits in words: ``chat: TTFT p99 <= 1000 ms, ITL p95 <= 50 ms``."""
    if study.slo is None:
        return []
    lines = []
    for name in study.workload.class_names():
        limits = study.slo.for_class(name)
        found = limits.limits_ms() if limits else {}
        said = [
            f"{metric.upper()} p{pct} <= {limit:g} ms" for (metric, pct), limit in found.items()
        ]
        lines.append(f"{name}: {', '.join(said)}")
    if study.measurement.latency_from == "slot":
        cap = study.workload.client.max_concurrency
        lines.append(
            f"TTFT and e2e count from when the client's slot freed (at most {cap} requests in "
            "flight; measurement.latency_from: slot), as vllm bench serve --max-concurrency "
            "counts them; the goodput from the schedule is shown beside"
        )
    return lines


def _miss(entry: SweepPoint) -> str:
    said = "; ".join(entry.point.violations) or "no request completed in the window"
    return f"r{entry.repeat}: {said}"


def curve(study: StudySpec, label: str, result: SweepResult) -> Curve:
    by_rate: dict[float, list[SweepPoint]] = {}
    for entry in result.points:
        if entry.counted:
            by_rate.setdefault(round(entry.rate_rps, 6), []).append(entry)
    points = []
    for rate, entries in sorted(by_rate.items()):
        loads = [e.point for e in entries]
        values, thin = {}, {}
        for metric_label, metric, pct, _ in slo_metrics(study):
            name = metric_label.split(" ", 1)[0]
            dists = [p.dists[name][metric] for p in loads if name in p.dists]
            finite = [v for v in (d.at(pct) for d in dists) if math.isfinite(v)]
            values[metric_label] = statistics.fmean(finite) if finite else math.inf
            short = [d.count for d in dists if not d.resolves(pct)]
            if short:
                thin[metric_label] = min(short)
        misses = tuple(_miss(e) for e in entries if not e.point.meets_slo)
        goodput = statistics.fmean(p.goodput_rps for p in loads)
        scheduled = [g for p in loads if (g := p.goodput_from_schedule_rps) is not None]
        from_schedule = statistics.fmean(scheduled) if len(scheduled) == len(loads) else None
        points.append(CurvePoint(rate, values, goodput, len(entries), misses, thin,
                                 goodput_from_schedule_rps=from_schedule))  # fmt: skip
    return Curve(label, result, tuple(points))


def _overall(start: Sequence[float], final: Sequence[float], study: StudySpec) -> Judgement | None:
    if len(start) < 2 or len(final) < 2:
        return None
    tuning = study.tuning
    # Measured at different times on different servers: unpaired.
    return judge(
        start, final, min_effect=tuning.min_effect_rel, confidence=tuning.confidence, method="welch"
    )


def gather(folder: RunFolder) -> ReportData:
    study = folder.study()
    events = folder.ledger.read()
    state = RunState.replay(events, study.objective)
    host = next((e.host for e in events if isinstance(e, RunStarted)), None)
    start = final = overall = None
    if state.baseline is not None:
        start = curve(study, "start", state.baseline.repeats)
    if state.promotions:
        last = state.promotions[-1]
        final = curve(study, "winner", last.repeats)
        if state.baseline is not None:
            overall = _overall(
                rules(study.objective).by_repeat(state.baseline.repeats),
                rules(study.objective).by_repeat(last.repeats),
                study,
            )
    config = state.incumbent or study.engine
    command = serve_command(study, config)
    return ReportData(folder, study, state, start, final, overall, command, host)
