"""What the workers of a shared study do next: a pure function of its state, the study, the
live workers and the time, like ``kneepoint.tune.decide`` is for ``kneepoint tune``.

The run goes by rounds. The baseline first, on one worker. Then a round screens up to one
proposal per live worker, all against the incumbent (``kneepoint.policies.rounds``). When
its screens are in, its finalists are validated one at a time, best screened first, each as
one task (the incumbent and the challenger interleaved on one GPU); a promotion ends the
round, and the next starts from the new incumbent. Nothing is planned while a task is still
out: rounds are synchronous, so every screen of a round is judged against one incumbent.
Budgets and "nothing left worth trying" stop the search exactly as they stop ``tune``; the
winner's burst check then runs as one last task, and the run finishes when it is in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Finished
from kneepoint.records.proposal import Proposal
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task
from kneepoint.run.state import RunState
from kneepoint.tune.decide import budget_stop, no_knee, nothing_left
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
    state = shared.state
    started = _baseline(shared)
    if started is not None:
        return started
    if shared.burst_of is not None:  # the burst check is in: the run ends as its search did
        return Plan(finished=shared.burst_of)
    generation = len(state.promotions)
    finalist = _next_finalist(shared)
    if finalist is not None:
        return Plan((finalist,))
    stop = no_knee(state, study) or budget_stop(state, study, now) or nothing_left(state, study)
    if stop is not None:
        return _stopped(shared, stop)
    size = max(1, workers)
    if study.budget.max_trials is not None:
        size = min(size, study.budget.max_trials - state.trials_run)
    proposals = _round(study, state, size)
    if not proposals:
        exhausted = Finished(reason="exhausted", detail="every candidate has been tried")
        return _stopped(shared, exhausted)
    first = state.next_trial_number()
    return Plan(
        tuple(
            Task(
                kind="screen",
                trial=first + i,
                generation=generation,
                proposal=p,
                quality_check=_changes_outputs(p, catalogue),
                batch=shared.batches + 1,
            )
            for i, p in enumerate(proposals)
        )
    )


def _stopped(shared: Shared, stop: Finished) -> Plan:
    """The search has stopped: the winner's burst check (``kneepoint.tune.burst_step``), as
    ``kneepoint tune`` runs it after its Finished; a run without a winner just ends."""
    if stop.reason == "baseline_failed" or shared.state.incumbent is None:
        return Plan(finished=stop)
    burst = Task(
        kind="burst",
        trial=0,
        generation=len(shared.state.promotions),
        batch=shared.batches + 1,
        stopped=stop,
    )
    return Plan((burst,))


def _baseline(shared: Shared) -> Plan | None:
    """Waiting, the baseline's task, or the end of a run whose baseline failed; None: on."""
    if shared.state.finished is not None or shared.pending:
        return Plan()
    if "baseline" not in shared.planned:
        return Plan((Task(kind="baseline", trial=0, generation=0, batch=1),))
    if shared.baseline_failure is not None:
        return Plan(finished=Finished(reason="baseline_failed", detail=shared.baseline_failure))
    return None


def _next_finalist(shared: Shared) -> Task | None:
    """The validation of the round's best screened finalist not yet validated."""
    state = shared.state
    waiting = [t for t in state.trials.values() if t.next_step() in ("quality", "validate")]
    validations = [
        Task(
            kind="validate",
            trial=t.trial,
            generation=len(state.promotions),
            proposal=t.proposal,
            quality_check=t.quality_check,
            batch=shared.batches + 1,
        )
        for t in sorted(waiting, key=lambda t: (-(t.measured_objective() or 0.0), t.trial))
    ]
    return next((v for v in validations if v.key not in shared.planned), None)


def _changes_outputs(proposal: Proposal, catalogue: KnobCatalogue) -> bool:
    knobs = [catalogue.get(name) for name in proposal.changes]
    return any(knob is not None and knob.changes_outputs for knob in knobs)


def _round(study: StudySpec, state: RunState, size: int) -> list[Proposal]:
    """The next round's proposals: ``kneepoint tune``'s proposer, asked for a batch."""
    return run_proposer(study, state, None).batch(size)
