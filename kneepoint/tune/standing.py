"""The console's one line after the baseline (what binds, the knee search's capacity as
`sweep` and `diagnose` read it, the repeats') and after each trial (its result against its
prediction, the incumbent, and the budget and time left)."""

from __future__ import annotations

import statistics
from datetime import datetime

from kneepoint.load import rules
from kneepoint.measure import duration
from kneepoint.records import Baseline, StudySpec
from kneepoint.run import RunState, TrialState


def baseline_words(baseline: Baseline, study: StudySpec) -> str:
    """What binds, the knee search's SLO capacity (the one number `kneepoint sweep` and
    `kneepoint diagnose` read from the same points) and the repeats' objective with its
    interval, each marked where it is only a floor."""
    rule = rules(study.objective)
    parts = [f"baseline: {baseline.diagnosis.headline()}"]
    knee = baseline.knee
    if rule.is_capacity:
        floor = f" (a floor: {knee.floor_reason})" if knee.floor_reason else ""
        parts.append(
            "knee search: no rate met the SLO"
            if knee.capacity_rps is None
            else f"knee search {knee.capacity_rps:.2f} req/s{floor}"
        )
    value = rule.value(baseline.repeats)
    if value is None:
        parts.append(f"{rule.name()}: nothing measured")
        return "; ".join(parts)
    repeats = baseline.repeats
    spread = ""
    if repeats.capacity_low_rps is not None and repeats.capacity_high_rps is not None:
        spread = f" ({repeats.capacity_low_rps:.2f}-{repeats.capacity_high_rps:.2f})"
    parts.append(
        f"repeated: {rule.name()} {value:.2f} {rule.unit()}" + (spread if rule.is_capacity else "")
    )
    return "; ".join(parts)


def standing(
    state: RunState,
    study: StudySpec,
    trial: TrialState,
    trial_wall_s: list[float],
    now: datetime,
) -> str:
    """``trial_wall_s``: this session's trials' wall times, for the time left."""
    measured, ratio = trial.measured_objective(), trial.measured_ratio()
    why = _why_kept(trial) if measured is not None else ""
    verdict = "promoted" if trial.promoted else f"kept the incumbent{why}"
    if trial.promoted and trial.validated is not None and trial.validated.early:
        verdict = "promoted from its first pair (the gain far beyond the incumbent's noise)"
    predicted = f"predicted {trial.proposal.prediction.capacity_ratio:.2f}x"
    budget = study.budget
    per = rules(study.objective).unit()
    if measured is None:
        value = f"{_nothing(trial)} ({predicted})"
    else:
        value = f"{measured:.2f} {per} ({predicted}{_measured_ratio(trial, ratio)})"
    parts = [
        f"trial {trial.trial}: {value}, {verdict}",
        f"incumbent {state.incumbent_objective or 0:.2f} {per}",
    ]
    hours = state.device_s / 3600.0
    if budget.max_trials is not None:
        left = budget.max_trials - state.trials_run
        parts.append(f"{left} trial{'s' * (left != 1)} left")
    used = f"{hours:.2f} device-h used"
    if budget.max_device_hours is not None:
        used += f" of {budget.max_device_hours:g}"
    if budget.price_per_gpu_hour_usd is not None:
        used += f" (${hours * budget.price_per_gpu_hour_usd:.2f})"
    return " | ".join([*parts, used, *_time_left(state, study, trial_wall_s, now)])


def _measured_ratio(trial: TrialState, ratio: float | None) -> str:
    """The ratio the verdict beside it is read from: a validated trial's paired gain over the
    incumbent measured beside it, not its validation over the incumbent's repeats measured
    before, which can disagree with the verdict in sign and size."""
    judged = trial.validated.judgement if trial.validated is not None else None
    if judged is not None and judged.gain_rel is not None:
        return f", measured {1.0 + judged.gain_rel:.2f}x in its pairs"
    return f", measured {ratio:.2f}x" if ratio is not None else ""


def _why_kept(trial: TrialState) -> str:
    """Why a trial that measured above the incumbent was not promoted, in a few words: without
    them a trial above the incumbent beside "kept the incumbent" reads as a mistake."""
    if trial.validated is not None and trial.validated.judgement is not None:
        return f" ({trial.validated.judgement.reason})"
    if trial.quality is not None and trial.quality.rejects:
        return " (its outputs failed the quality check)"
    reason = trial.screened.reason if trial.screened is not None else ""
    clause = reason.rsplit(", ", 1)[-1].removesuffix(": not a finalist").removeprefix("is ")
    return f" ({clause})" if clause and clause != reason else ""


def _nothing(trial: TrialState) -> str:
    """What a trial that gave no objective measured: points that each missed, or none."""
    screened = trial.screened
    points = 0 if screened is None or screened.sweep is None else len(screened.sweep.points)
    if points:
        return f"no rate met the SLO in {points} point{'s' * (points != 1)}"
    return "nothing measured"


def _time_left(
    state: RunState, study: StudySpec, trial_wall_s: list[float], now: datetime
) -> list[str]:
    """Wall time to the first limit, at this session's pace per trial (an estimate: a trial
    that goes on to validation takes several times one that stops at its screen), the
    device-hours left at one incumbent server's GPUs, or the deadline: none past its budget."""
    budget = study.budget
    pace = statistics.fmean(trial_wall_s) if trial_wall_s else None
    left: list[float] = []
    if pace is not None and budget.max_trials is not None:
        left.append(pace * max(0, budget.max_trials - state.trials_run))
    if budget.max_device_hours is not None and state.incumbent is not None:
        device_left_s = max(0.0, budget.max_device_hours * 3600.0 - state.device_s)
        left.append(device_left_s / state.incumbent.gpu_count)
    deadline = budget.deadline_after(state.started.started_at) if state.started else None
    if deadline is not None:
        left.append(max(0.0, (deadline - now).total_seconds()))
    return [f"~{duration(min(left))} left"] if left else []
