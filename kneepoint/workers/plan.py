"""What the workers of a shared study queue next: ``kneepoint.tune.decide``'s actions for as
many GPUs as there are live workers, each measuring action a task (``kneepoint.records.task``).

The decisions are ``kneepoint tune``'s (``next_actions``): the baseline, then rounds of up to
one proposal per live worker, screened side by side against the incumbent; a round's finalists
validated side by side, up to one per live worker, best screened first, each as one task (its
quality check, the incumbent and the challenger interleaved on one GPU); the best winner's
promotion as a task of its own once they are in; budgets and "nothing
left worth trying" stop the search as they stop ``tune``, and the winner's burst check runs as
one last task. An action already queued is waited for: nothing new is planned while a task is
out, so every screen of a round is judged against one incumbent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import assert_never

from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Finished
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task, TaskKind
from kneepoint.tune.decide import (
    Action,
    CheckBurst,
    CheckQuality,
    Done,
    MeasureBaseline,
    Promote,
    Propose,
    Screen,
    Start,
    Stop,
    Validate,
    next_actions,
)
from kneepoint.tune.execute import Measure, proposed
from kneepoint.tune.proposers import run_proposer
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
    actions = next_actions(shared.state, study, now, max(1, workers))
    plans = [_plan(shared, study, catalogue, action) for action in actions]
    finished = next((p.finished for p in plans if p.finished is not None), None)
    if finished is not None:
        return Plan(finished=finished)
    fresh = [t for p in plans for t in p.tasks if _fresh(t, shared.planned)]
    return Plan(tuple(fresh))


def _fresh(task: Task, planned: frozenset[str]) -> bool:
    """Not queued before; or a promotion every attempt of which died (it measures nothing,
    so it is queued again rather than lost with the round's winner)."""
    return task.key not in planned or task.kind == "promote"


def _plan(shared: Shared, study: StudySpec, catalogue: KnobCatalogue, action: Action) -> Plan:
    match action:
        case Propose(n):
            return _round(shared, study, catalogue, n)
        case Stop(finished):
            return _stopped(shared, finished)
        case Done():
            return Plan(finished=shared.state.finished)
        case MeasureBaseline() | Screen() | CheckQuality() | Validate() | Promote() | CheckBurst():
            return Plan((_task(shared, action),))
        case Start():
            raise AssertionError("a shared study starts when its study file is published")
        case _:
            assert_never(action)


def _task(shared: Shared, action: Measure) -> Task:
    """The task that carries out an action. A validation's task takes its trial's quality
    check and validation on one GPU; a promotion is its own task, queued once every
    validation side by side with it is in; a screen's was queued with its round."""
    state, batch = shared.state, shared.batches + 1
    generation = len(state.promotions)
    match action:
        case MeasureBaseline():
            return Task(kind="baseline", trial=0, generation=0, batch=1)
        case CheckBurst():
            return Task(
                kind="burst", trial=0, generation=generation, batch=batch, stopped=state.finished
            )
        case Screen(trial) | CheckQuality(trial) | Validate(trial) | Promote(trial):
            return Task(
                kind=_KINDS[type(action)],
                trial=trial.trial,
                generation=generation,
                proposal=trial.proposal,
                quality_check=trial.quality_check,
                batch=batch,
            )
        case _:
            assert_never(action)


_KINDS: dict[type, TaskKind] = {
    Screen: "screen", CheckQuality: "validate", Validate: "validate", Promote: "promote"
}  # fmt: skip


def _round(shared: Shared, study: StudySpec, catalogue: KnobCatalogue, n: int) -> Plan:
    """A round of up to ``n`` screens, asked of ``kneepoint tune``'s own proposer."""
    state = shared.state
    proposals = run_proposer(study, state, None).batch(n)
    trials = proposed(proposals, state, catalogue, study.tuning.stop)
    if isinstance(trials, Finished):
        return _stopped(shared, trials)
    screens = (
        Task(
            kind="screen",
            trial=t.trial,
            generation=len(state.promotions),
            proposal=t.proposal,
            quality_check=t.quality_check,
            batch=shared.batches + 1,
        )
        for t in trials
    )
    return Plan(tuple(screens))


def _stopped(shared: Shared, stop: Finished) -> Plan:
    """The search has stopped: the winner's burst check (``kneepoint.tune.burst_step``), as
    ``kneepoint tune`` runs it after its Finished; a run without a winner just ends."""
    if not stop.burst_follows or shared.state.incumbent is None:
        return Plan(finished=stop)
    burst = Task(
        kind="burst",
        trial=0,
        generation=len(shared.state.promotions),
        batch=shared.batches + 1,
        stopped=stop,
    )
    return Plan((burst,))
