"""What the workers of a shared study queue next: ``kneepoint.tune.decide``'s actions for as
many GPUs as there are live workers, each measuring action a task (``kneepoint.records.task``).

The decisions are ``kneepoint tune``'s (``next_actions``): the baseline (its knee search, then
its repeats, side by side where several workers share them, then its Baseline made of them),
then rounds of up to one proposal per live worker, screened side by side against the incumbent;
a round's finalists checked and validated side by side, up to one per live worker, best screened
first, their repeats a task each (each repeat's pair, the incumbent and the challenger in turn,
on one GPU: a validation's critical path was its repeats in a row, benchmarks/README.md's
workers.py); the best winner's promotion as a task of its own once they are in; budgets and
"nothing left worth trying" stop the search as they stop ``tune``, and the winner's burst check
runs as one last task. An action already queued is waited for: nothing new is planned while a
task is out, so every screen of a round is judged against one incumbent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import assert_never

from kneepoint.policies.judge import measured_repeats, next_repeats, outrun
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Finished,
    JoinBaseline,
    KnobCatalogue,
    MeasureRepeats,
    Promote,
    Proposed,
    Screen,
    SearchKnee,
    StudySpec,
    Task,
    TaskStep,
    Validate,
)
from kneepoint.run import TrialState
from kneepoint.tune import (
    Action,
    Done,
    MeasureBaseline,
    Propose,
    Start,
    Stop,
    next_actions,
    proposed,
    repeats_wanted,
    run_proposer,
)
from kneepoint.workers.state import Shared


@dataclass(frozen=True)
class Plan:
    """Tasks to queue, or the end of the run; neither: wait for the tasks that are out."""

    tasks: tuple[Task, ...] = ()
    finished: Finished | None = None


def plan(
    shared: Shared, study: StudySpec, catalogue: KnobCatalogue, workers: int, now: datetime
) -> Plan:
    if shared.pending:
        return Plan()  # a batch is judged whole: the next is planned once all of it is in
    workers = max(1, workers)
    actions = _begun_first(shared, study, next_actions(shared.state, study, now, workers))
    # the GPUs each validation of this batch has to itself (one: its early pair first)
    spare = workers // max(1, sum(isinstance(a, Validate) for a in actions))
    plans = [_plan(shared, study, catalogue, action, workers, spare=spare) for action in actions]
    finished = next((p.finished for p in plans if p.finished is not None), None)
    if finished is not None:
        return Plan(finished=finished)
    fresh = [t for p in plans for t in p.tasks if _fresh(t, shared.planned)]
    return Plan(tuple(t.model_copy(update={"workers": workers}) for t in fresh))


def _begun_first(shared: Shared, study: StudySpec, actions: list[Action]) -> list[Action]:
    """A promotion closes the rest of its round, so it waits for the round's finalists whose
    steps have begun and that can still beat it: one whose quality check passed, or whose
    first repeats could not tell and do not already put it below the winner
    (``kneepoint.policies.judge.contention``), takes its next step first. (A finalist's steps
    were one task before its repeats were split, all in before any promotion; ``tune`` takes
    one finalist at a time and never has such a trial.)"""
    promote = next((a for a in actions if isinstance(a, Promote)), None)
    if promote is None:
        return actions
    winner = shared.state.trials[promote.trial]
    begun = [
        t
        for t in shared.state.open_trials()
        if t.next_step() == "validate"
        and (t.quality is not None or t.trial in shared.parts)
        and not _outrun(shared, study, t, winner)
    ]
    return [Validate(trial=t.trial) for t in begun] or actions


def _outrun(shared: Shared, study: StudySpec, trial: TrialState, winner: TrialState) -> bool:
    """Whether ``trial``'s pairs so far put it below the promoting ``winner``."""
    parts = shared.parts.get(trial.trial, ())
    known = shared.state.incumbent_by_repeat
    return outrun(study, trial.trial, parts, winner.validated, known) is not None


def _fresh(task: Task, planned: frozenset[str]) -> bool:
    """Not queued before; or a promotion every attempt of which died (it measures nothing,
    so it is queued again rather than lost with the round's winner)."""
    return task.key not in planned or isinstance(task.action, Promote)


def _plan(
    shared: Shared,
    study: StudySpec,
    catalogue: KnobCatalogue,
    action: Action,
    workers: int,
    *,
    spare: int,
) -> Plan:
    match action:
        case Propose(n):
            return _round(shared, study, catalogue, n)
        case Stop(finished):
            return _stopped(shared, finished)
        case Done():
            return Plan(finished=shared.state.finished)
        case Validate(trial=n):
            return Plan(_validation(shared, study, shared.state.trials[n], workers, spare))
        case MeasureBaseline():
            return Plan(_baseline(shared, study, workers))
        case Screen() | CheckQuality() | Promote() | CheckBurst():
            return Plan((_alone(shared, action),))
        case Start():
            raise AssertionError("a shared study starts when its study file is published")
        case _:
            assert_never(action)


def _alone(shared: Shared, action: Screen | CheckQuality | Promote | CheckBurst) -> Task:
    """A step queued on its own: a promotion once every validation side by side with it is
    in; the burst check with the stop it follows (the run finishes with it)."""
    if isinstance(action, CheckBurst):
        return _queued(shared, CheckBurst(stopped=shared.state.finished))
    return _queued(shared, action, shared.state.trials[action.trial])


def _queued(shared: Shared, action: TaskStep, trial: TrialState | Proposed | None = None) -> Task:
    """``action`` as a task of the next batch, against the incumbent now; a trial's carries
    its proposal (a screen's Proposed is made of it, ``kneepoint.workers.state``)."""
    return Task(
        action=action,
        generation=len(shared.state.promotions),
        batch=shared.batches + 1,
        proposal=None if trial is None else trial.proposal,
        quality_check=trial is not None and trial.quality_check,
    )


def _baseline(shared: Shared, study: StudySpec, workers: int) -> tuple[Task, ...]:
    """The baseline's next task: its knee search; then its repeats around the knee
    (``_split``); then its Baseline made of them (no device time)."""
    knee = next((p for p in shared.baseline_parts if p.repeats == 0), None)
    if knee is None:
        return (_queued(shared, SearchKnee()),)
    if len(shared.baseline_parts) > 1 or not repeats_wanted(study, knee):
        return (_queued(shared, JoinBaseline()),)
    return tuple(
        _queued(shared, MeasureRepeats(repeats=r))
        for r in _split(0, study.tuning.validate_repeats, workers)
    )


def _split(first: int, n: int, workers: int) -> list[tuple[int, int]]:
    """Repeats ``first`` to ``first + n - 1`` as tasks: one a repeat where several workers
    share them (a batch's tasks go to whichever GPU is free, so two finalists' six repeats
    on three GPUs take two repeats' time, where a split by finalist took three: rag's batch
    12, benchmarks/README.md), all in one on one worker (``kneepoint tune``'s order)."""
    if workers == 1:
        return [(first, n)]
    return [(first + i, 1) for i in range(n)]


def _validation(
    shared: Shared, study: StudySpec, trial: TrialState, workers: int, spare: int
) -> tuple[Task, ...]:
    """A finalist's next phase of validation repeats (``kneepoint.policies.judge.verdict``:
    the early look's pair first where this batch's validations leave it one GPU, ``spare``;
    split by ``_split``)."""
    first = measured_repeats(shared.parts.get(trial.trial, ()))
    phase = next_repeats(study, first, spare)
    return tuple(
        _queued(shared, Validate(trial=trial.trial, repeats=r), trial)
        for r in _split(phase.start, len(phase), workers)
    )


def _round(shared: Shared, study: StudySpec, catalogue: KnobCatalogue, n: int) -> Plan:
    """A round of up to ``n`` screens, asked of ``kneepoint tune``'s own proposer."""
    state = shared.state
    proposals = run_proposer(study, state, None).batch(n)
    trials = proposed(proposals, state, catalogue, study.tuning.stop)
    if isinstance(trials, Finished):
        return _stopped(shared, trials)
    screens = (_queued(shared, Screen(trial=t.trial), t) for t in trials)
    return Plan(tuple(screens))


def _stopped(shared: Shared, stop: Finished) -> Plan:
    """The search has stopped: the winner's burst check (``kneepoint.tune.burst_step``), as
    ``kneepoint tune`` runs it after its Finished; a run without a winner just ends."""
    if not stop.burst_follows or shared.state.incumbent is None:
        return Plan(finished=stop)
    return Plan((_queued(shared, CheckBurst(stopped=stop)),))
