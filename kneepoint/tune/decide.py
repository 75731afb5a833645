"""What a run on one GPU does next (``next_action``): a pure function of the run's state
(rebuilt from the ledger), the study and the time, over a closed set of actions. Its executor
(``kneepoint.tune.loop``) carries the actions out and records their events; nothing here
measures or writes. A run on several GPU sets takes its steps from ``kneepoint.tune.dispatch``,
which shares the stops below.

The order: the run starts and measures its baseline; a round proposes a configuration and
screens it against the incumbent; a finalist takes its steps (quality check, validation), the
best screened first where a round left several open (a pool's run resumed on one GPU); the
best validated winner is promoted, which closes the rest of its round; when no trial is open, a
budget, the lack of a knee or of anything to try, or trials that stopped paying
(``kneepoint.tune.budget``) stop the search, and the winner's burst check follows the stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kneepoint.load import out_of_reach, rules
from kneepoint.policies.search import best_left, learned_factors, nothing_worth_trying
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Finished,
    Promote,
    Screen,
    StudySpec,
    TrialStep,
    Validate,
    nothing_met,
)
from kneepoint.run import RunState, TrialState
from kneepoint.tune.budget import diminishing_returns, floor_rel, long_shots_only, unaffordable


@dataclass(frozen=True)
class Start:
    """Open the run's record."""


@dataclass(frozen=True)
class MeasureBaseline:
    """Knee search, repeats and diagnosis of the starting configuration (the whole of it, on
    one GPU; a pool's slots share its parts, ``kneepoint.tune.dispatch``)."""


@dataclass(frozen=True)
class Stop:
    """End the run, for the reason given."""

    finished: Finished


@dataclass(frozen=True)
class Propose:
    """Ask the proposer for the next round's configurations (``n``, one per free GPU)."""

    n: int = 1


@dataclass(frozen=True)
class Done:
    """The run has finished."""


Action = Start | MeasureBaseline | Stop | Propose | TrialStep | CheckBurst | Done
"""The closed set: the run's own steps, and the measuring steps of
``kneepoint.records.actions`` (each naming its trial by number)."""


def next_action(state: RunState, study: StudySpec, now: datetime) -> Action:
    """The one thing a run on one GPU does next."""
    run = _run_step(state)
    if run is not None:
        return run
    trials = state.open_trials()
    screen = next((t for t in trials if t.next_step() == "screen"), None)
    if screen is not None:
        return Screen(trial=screen.trial)
    if trials:
        step = finalist_step(trials)
        over = _over_budget(state, study, step)
        return step if over is None else Stop(over)
    stop = search_stop(state, study, now)
    return Propose() if stop is None else Stop(stop)


def search_stop(state: RunState, study: StudySpec, now: datetime) -> Finished | None:
    """Why the search proposes nothing more, if it is over: no knee, a rate out of reach,
    a budget spent, or nothing left worth a trial."""
    return (
        no_knee(state, study)
        or rate_out_of_reach(state, study)
        or budget_stop(state, study, now)
        or unaffordable(state, study, "screen", 0)
        or nothing_left(state, study)
    )


def _over_budget(state: RunState, study: StudySpec, action: Action) -> Finished | None:
    """A validation the device-hour budget left cannot pay for (``unaffordable``)."""
    if not isinstance(action, Validate):
        return None
    return unaffordable(state, study, "validation", action.trial)


def finalist_step(trials: list[TrialState]) -> TrialStep:
    """A round's next finalist step, once its screens are in: the best validated winner's
    promotion (it closes the rest of the round); else the next step of the best measured."""
    ranked = sorted(trials, key=lambda t: (-(t.measured_objective() or 0.0), t.trial))
    winners = [t for t in ranked if t.next_step() == "promote"]
    if winners:
        return Promote(trial=winners[0].trial)
    return trial_action(ranked[0])


def _run_step(state: RunState) -> Action | None:
    """The run's own steps around its trials: start, baseline, burst check, done."""
    if state.finished is not None:
        return CheckBurst() if state.burst_due else Done()
    if state.started is None:
        return Start()
    return MeasureBaseline() if state.baseline is None else None


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


def rate_out_of_reach(state: RunState, study: StudySpec) -> Finished | None:
    """A stop (the run failed) when a goodput-at-rate study's rate is so far past the
    baseline's SLO capacity that no move reaches it (``kneepoint.load.out_of_reach``): every
    trial would measure next to nothing."""
    if state.baseline is None or state.promotions:
        return None
    capacity = state.baseline.knee.capacity_rps or state.baseline.repeats.capacity_rps
    detail = out_of_reach(study.objective, capacity, state.incumbent_objective)
    return None if detail is None else Finished(reason="baseline_failed", detail=detail)


def trial_action(trial: TrialState) -> TrialStep:
    """The action of a trial's next step."""
    step, n = trial.next_step(), trial.trial
    match step:
        case "screen":
            return Screen(trial=n)
        case "quality":
            return CheckQuality(trial=n)
        case "validate":
            return Validate(trial=n)
        case "promote":
            return Promote(trial=n)
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
    """A stop when no candidate is left; then, under ``tuning.stop: budget``, when the last
    trials stopped paying (``kneepoint.tune.budget``), or under ``predicted`` when none is
    worth a trial: each re-priced by what its knob's last move measured, none beats the
    incumbent's noise."""
    assert state.pruning is not None and state.diagnosis is not None
    assert state.incumbent_repeats is not None
    if long_shots_only(study, state):
        return diminishing_returns(state, study)
    if not state.pruning.candidates:
        detail = (
            f"nothing left worth trying: {state.diagnosis.headline()}, and every knob "
            "is ruled out, so nothing kneepoint can change would help"
        )
        return Finished(reason="nothing_to_try", detail=detail)
    if study.tuning.stop == "budget":
        return diminishing_returns(state, study)
    floor = floor_rel(state, study)
    factors = learned_factors(state.measured_moves())
    why = nothing_worth_trying(best_left(state.pruning.candidates, factors), floor)
    return None if why is None else Finished(reason="nothing_worth_trying", detail=why)
