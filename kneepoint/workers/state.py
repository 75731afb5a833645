"""A shared study's state as the loop's ``RunState``: its tasks' results put together, so the
workers' planner reads the incumbent, its knee, the trials and their outcomes, the budget and
what is left worth trying exactly as ``kneepoint tune`` does.

A task every attempt of which failed (its workers died ``max_retry + 1`` times) is read as a
crashed trial: the configuration may be what kills them. A finalist left unvalidated when a
sibling of its round was promoted is read as closed, superseded: it was screened against an
incumbent that is gone, and the walk from the new one decides whether it is tried again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kneepoint import __version__
from kneepoint.load.objective import rules
from kneepoint.records.ledger import (
    Baseline,
    Event,
    Finished,
    Promoted,
    Proposed,
    RunStarted,
    Screened,
    Validated,
)
from kneepoint.records.proposal import Outcome
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task
from kneepoint.run.folder import study_digest
from kneepoint.run.state import RunState, TrialState
from kneepoint.tune.burst_step import unmeasured
from kneepoint.workers.shared_study import Attempts


@dataclass(frozen=True)
class Shared:
    """The run's state, and the tasks still waiting or running."""

    state: RunState
    pending: tuple[Task, ...]
    planned: frozenset[str]
    """Every task key ever queued."""
    baseline_failure: str | None = None
    batches: int = 0
    """Plannings so far (each queued one batch of tasks)."""
    makespan_s: float = 0.0
    """Device time along the run's critical path: each batch's longest task, summed (its
    tasks ran side by side). With one worker it is the device time itself."""
    burst_of: Finished | None = None
    """The stop whose burst check is in (None: no burst check has finished)."""


def _lost(attempts: Attempts) -> str:
    return (
        f"lost: the {attempts.failed} workers that ran it died or went silent "
        "(it may be what kills them)"
    )


def shared_state(
    study: StudySpec, started_at: datetime, tasks: list[Attempts], finished: Finished | None
) -> Shared:
    state = RunState(objective=study.objective)
    state.started = RunStarted(
        study_name=study.name,
        seed=study.seed,
        kneepoint_version=__version__,
        started_at=started_at,
        study_sha256=study_digest(study),
    )
    pending = tuple(a.task for a in tasks if a.pending)
    failure = _baseline(state, next((a for a in tasks if a.task.kind == "baseline"), None))
    screens = sorted((a for a in tasks if a.task.kind == "screen"), key=lambda a: a.task.trial)
    validations = {a.task.trial: a for a in tasks if a.task.kind == "validate"}
    promoted: dict[int, Promoted] = {}
    for attempts in screens:
        trial = _trial(state, attempts, validations.get(attempts.task.trial))
        if trial.promoted is not None:
            promoted[attempts.task.generation] = trial.promoted
    for generation in sorted(promoted):
        event = promoted[generation]
        state.promotions.append(event)
        _incumbent(state, event)
    _supersede(state, pending, {a.task.trial: a.task.generation for a in screens})
    burst = next((a for a in tasks if a.task.kind == "burst"), None)
    burst_of = _burst(state, burst, study)
    state.device_s = sum(a.result.device_s for a in tasks if a.result is not None)
    state.finished = finished
    planned = frozenset(a.task.key for a in tasks)
    batches = max((a.task.batch for a in tasks), default=0)
    longest: dict[int, float] = {}
    for a in tasks:
        if a.result is not None:
            longest[a.task.batch] = max(longest.get(a.task.batch, 0.0), a.result.device_s)
    return Shared(state, pending, planned, failure, batches, sum(longest.values()), burst_of)


def ledger_events(state: RunState) -> list[Event]:
    """The shared run as a ``kneepoint tune`` ledger (so ``kneepoint report`` reads it): each
    trial's events in trial order. A trial screened in the same round as a promoted one but
    numbered after it reads as proposed against the new incumbent; its measurements are
    its own."""
    events: list[Event] = [e for e in (state.started, state.baseline) if e is not None]
    for number in sorted(state.trials):
        trial = state.trials[number]
        events.append(
            Proposed(trial=number, proposal=trial.proposal, quality_check=trial.quality_check)
        )
        events += [
            e
            for e in (trial.screened, trial.quality, trial.validated, trial.promoted)
            if e is not None
        ]
    events += [e for e in (state.finished, state.burst) if e is not None]
    return events


def _burst(state: RunState, attempts: Attempts | None, study: StudySpec) -> Finished | None:
    """Set the winner's burst check; the stop it followed once it is in (a check every
    attempt of which died reads as skipped, with why)."""
    if attempts is None or attempts.pending:
        return None
    stopped = attempts.task.stopped
    assert stopped is not None and state.incumbent is not None
    result = attempts.result
    if result is not None and result.burst is not None:
        state.burst = result.burst
    else:
        reason = _lost(attempts) if result is None else (result.failure or "not measured")
        skipped = f"the burst check's server {reason}"
        state.burst = unmeasured(study, state.incumbent, skipped)
    return stopped


def _baseline(state: RunState, attempts: Attempts | None) -> str | None:
    """Set the baseline as the incumbent; the cause when it failed."""
    if attempts is None or attempts.pending:
        return None
    result = attempts.result
    if result is None:
        return _lost(attempts)
    if result.baseline is None:
        return result.failure or "the baseline was not measured"
    state.baseline = result.baseline
    _incumbent(state, result.baseline)
    return None


def _incumbent(state: RunState, event: Baseline | Promoted) -> None:
    state.incumbent, state.incumbent_repeats = event.config, event.repeats
    state.incumbent_objective = rules(state.objective).value(event.repeats)
    state.diagnosis, state.pruning = event.diagnosis, event.pruning


def _trial(state: RunState, screen: Attempts, validation: Attempts | None) -> TrialState:
    task = screen.task
    assert task.proposal is not None
    against = _objective_at(state, task.generation)
    trial = TrialState(
        task.trial, task.proposal, task.quality_check, against, objective=state.objective
    )
    state.trials[task.trial] = trial
    if screen.result is not None:
        trial.screened = screen.result.screened
    elif not screen.pending:
        lost = Outcome(status="crashed", detail=_lost(screen))
        trial.screened = Screened(trial=task.trial, outcome=lost, reason=lost.detail)
    if validation is None:
        return trial
    result = validation.result
    if result is not None:
        trial.quality, trial.validated = result.quality, result.validated
        trial.promoted = result.promoted
    elif not validation.pending:
        lost = Outcome(status="crashed", detail=f"during validation: {_lost(validation)}")
        trial.validated = Validated(trial=task.trial, failure=lost)
    return trial


def _objective_at(state: RunState, generation: int) -> float | None:
    """The incumbent's objective when a task of this generation was planned."""
    if generation == 0:
        baseline = state.baseline
        return None if baseline is None else rules(state.objective).value(baseline.repeats)
    promoted = sorted(
        (t.trial, t.promoted.objective) for t in state.trials.values() if t.promoted is not None
    )
    return promoted[generation - 1][1] if generation <= len(promoted) else None


def _supersede(state: RunState, pending: tuple[Task, ...], generations: dict[int, int]) -> None:
    """Close finalists of an earlier incumbent's rounds that were never validated."""
    generation = len(state.promotions)
    busy = {t.trial for t in pending}
    for trial in state.trials.values():
        screened = trial.screened
        if screened is None or trial.next_step() is None or trial.trial in busy:
            continue
        if generations[trial.trial] < generation:
            reason = (
                f"superseded: {screened.reason}; a sibling of its round was promoted "
                "first, and it was screened against the incumbent before"
            )
            trial.screened = screened.model_copy(update={"finalist": False, "reason": reason})
