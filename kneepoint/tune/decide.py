"""What the loop does next: a pure function of the run's state (rebuilt from the ledger), the
study and the time, over a closed set of actions. The executor (``kneepoint.tune.loop``)
carries each out and records its event; nothing here measures or writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kneepoint.load.objective import rules
from kneepoint.policies.learning import best_left, learned_factors, nothing_worth_trying
from kneepoint.records.ledger import Finished
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import nothing_met
from kneepoint.run.state import RunState, Step, TrialState


@dataclass(frozen=True)
class Start:
    """Open the run's record."""


@dataclass(frozen=True)
class MeasureBaseline:
    """Knee search, repeats and diagnosis of the starting configuration."""


@dataclass(frozen=True)
class Stop:
    """End the run, for the reason given."""

    finished: Finished


@dataclass(frozen=True)
class Propose:
    """Ask the proposer for the next configuration."""


@dataclass(frozen=True)
class _OnTrial:
    trial: TrialState


@dataclass(frozen=True)
class Screen(_OnTrial):
    """Preflight and screen the trial's configuration."""


@dataclass(frozen=True)
class CheckQuality(_OnTrial):
    """Compare the trial's greedy outputs with the incumbent's."""


@dataclass(frozen=True)
class Validate(_OnTrial):
    """Validate the finalist against the incumbent, interleaved."""


@dataclass(frozen=True)
class Promote(_OnTrial):
    """Make the validated winner the incumbent."""


@dataclass(frozen=True)
class CheckBurst:
    """Burst the winner and time its recovery (after the search has finished)."""


@dataclass(frozen=True)
class Done:
    """The run has finished."""


TrialAction = Screen | CheckQuality | Validate | Promote
Action = Start | MeasureBaseline | Stop | Propose | TrialAction | CheckBurst | Done


def next_action(state: RunState, study: StudySpec, now: datetime) -> Action:
    """The one thing the run does next."""
    step, trial = state.next_step()
    if trial is not None:
        return _trial_action(step, trial)
    if step == "done":
        return Done()
    if step == "burst":
        return CheckBurst()
    if step in ("start", "baseline"):
        return Start() if step == "start" else MeasureBaseline()
    stop = no_knee(state, study) or budget_stop(state, study, now) or nothing_left(state, study)
    return Stop(stop) if stop is not None else Propose()


def no_knee(state: RunState, study: StudySpec) -> Finished | None:
    """A stop (the run failed) when the baseline of an SLO-capacity study has no counted
    knee: no counted rate met the SLO, or none failed above the highest that did. Nothing
    can then be judged against it, nor said about what binds."""
    baseline = state.baseline
    if baseline is None or not rules(study.objective).is_capacity or state.promotions:
        return None
    knee, repeats = baseline.knee, baseline.repeats
    if knee.capacity_rps is None and repeats.capacity_rps is None:
        return Finished(reason="baseline_failed", detail=nothing_met(knee))
    if knee.floor_reason is not None and repeats.floor_reason is not None:
        detail = (
            f"the baseline never saw a counted failing rate: {knee.floor_reason}; "
            "its SLO capacity is only a floor, so no change can be judged against "
            "it and what binds cannot be named"
        )
        return Finished(reason="baseline_failed", detail=detail)
    return None


def _trial_action(step: Step, trial: TrialState) -> TrialAction:
    match step:
        case "screen":
            return Screen(trial)
        case "quality":
            return CheckQuality(trial)
        case "validate":
            return Validate(trial)
        case "promote":
            return Promote(trial)
    raise AssertionError(f"a trial has no {step} step")


def budget_stop(state: RunState, study: StudySpec, now: datetime) -> Finished | None:
    """The budget limit the run has reached, if any."""
    budget = study.budget
    if budget.max_trials is not None and state.trials_run >= budget.max_trials:
        return Finished(reason="max_trials", detail=f"{state.trials_run} trials run")
    hours = state.device_s / 3600.0
    if budget.max_device_hours is not None and hours >= budget.max_device_hours:
        return Finished(reason="max_device_hours", detail=f"{hours:.2f} device-hours spent")
    assert state.started is not None
    deadline = budget.deadline_after(state.started.started_at)
    if deadline is not None and now >= deadline:
        return Finished(reason="deadline", detail=f"deadline {deadline.isoformat()} passed")
    return None


def nothing_left(state: RunState, study: StudySpec) -> Finished | None:
    """A stop when no candidate is left, or none is worth a trial: each re-priced by what its
    knob's last move against this incumbent measured, none beats the incumbent's noise."""
    assert state.pruning is not None and state.diagnosis is not None
    assert state.incumbent_repeats is not None
    if not state.pruning.candidates:
        detail = (
            f"nothing left worth trying: {state.diagnosis.headline()}, and every knob "
            "is ruled out, so nothing kneepoint can change would help"
        )
        return Finished(reason="nothing_to_try", detail=detail)
    floor = max(
        study.tuning.min_effect_rel, rules(study.objective).noise_rel(state.incumbent_repeats)
    )
    factors = learned_factors(state.measured_moves())
    why = nothing_worth_trying(best_left(state.pruning.candidates, factors), floor)
    return None if why is None else Finished(reason="nothing_worth_trying", detail=why)
