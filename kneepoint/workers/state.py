"""A shared study's state as the loop's ``RunState``: its tasks' events, in the order the run
took them, replayed through ``RunState.apply`` (the one state builder), so the workers' planner
reads the incumbent, its knee, the trials and their outcomes, the budget and what is left
worth trying exactly as ``kneepoint tune`` does, and the events are the run's ledger.

The order: batch by batch (a batch is queued by one planning and the next is planned once all
of it is in), each round's trials proposed first, then what each task recorded, by trial. A
task every attempt of which failed (its workers died ``max_retry + 1`` times) is read as a
crashed trial: the configuration may be what kills them. Promotions close the finalists of
their round still waiting, superseded (``RunState.apply``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kneepoint import __version__
from kneepoint.records.ledger import (
    Event,
    Finished,
    Proposed,
    QualityChecked,
    RunStarted,
    Screened,
    Validated,
)
from kneepoint.records.proposal import Outcome
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task
from kneepoint.run.folder import study_digest
from kneepoint.run.state import RunState
from kneepoint.tune.burst_step import unmeasured
from kneepoint.workers.shared_study import Attempts


@dataclass(frozen=True)
class Shared:
    """The run's state and its events, and the tasks still waiting or running."""

    state: RunState
    events: tuple[Event, ...]
    """The run as a ``kneepoint tune`` ledger (``kneepoint report`` reads it)."""
    pending: tuple[Task, ...]
    planned: frozenset[str]
    """Every task key ever queued."""
    batches: int = 0
    """Plannings so far (each queued one batch of tasks)."""
    makespan_s: float = 0.0
    """Device time along the run's critical path: each batch's longest task, summed (its
    tasks ran side by side). With one worker it is the device time itself."""


def shared_state(
    study: StudySpec, started_at: datetime, tasks: list[Attempts], finished: Finished | None
) -> Shared:
    started = RunStarted(
        study_name=study.name,
        seed=study.seed,
        kneepoint_version=__version__,
        started_at=started_at,
        study_sha256=study_digest(study),
    )
    events: list[Event] = [started]
    for batch in sorted({a.task.batch for a in tasks}):
        events += _batch_events(study, sorted(_of_batch(tasks, batch), key=_order), events)
    if finished is not None and not any(isinstance(e, Finished) for e in events):
        events.append(finished)  # a stop with no burst check after it
    state = RunState.replay(events, study.objective)
    longest: dict[int, float] = {}
    for a in tasks:
        if a.result is not None:
            longest[a.task.batch] = max(longest.get(a.task.batch, 0.0), a.result.device_s)
    return Shared(
        state,
        tuple(events),
        tuple(a.task for a in tasks if a.pending),
        frozenset(a.task.key for a in tasks),
        max((a.task.batch for a in tasks), default=0),
        sum(longest.values()),
    )


def _of_batch(tasks: list[Attempts], batch: int) -> list[Attempts]:
    return [a for a in tasks if a.task.batch == batch]


def _order(attempts: Attempts) -> int:
    return attempts.task.trial


def _batch_events(study: StudySpec, batch: list[Attempts], before: list[Event]) -> list[Event]:
    """A batch's events: its round's trials proposed, then each task's record."""
    events: list[Event] = [
        Proposed(trial=a.task.trial, proposal=a.task.proposal, quality_check=a.task.quality_check)
        for a in batch
        if a.task.kind == "screen" and a.task.proposal is not None
    ]
    for attempts in batch:
        if attempts.task.kind == "burst":
            assert attempts.task.stopped is not None
            events.append(attempts.task.stopped)
        if not attempts.pending:
            events += recorded(study, attempts, [*before, *events])
    return events


def _lost(attempts: Attempts) -> str:
    return (
        f"lost: the {attempts.failed} workers that ran it died or went silent "
        "(it may be what kills them)"
    )


def recorded(study: StudySpec, attempts: Attempts, before: list[Event]) -> list[Event]:
    """What a finished task recorded; for one every attempt of which died, its failure."""
    task, result = attempts.task, attempts.result
    if result is not None and result.events():
        return list(result.events())
    why = _lost(attempts) if result is None else (result.failure or "not measured")
    match task.kind:
        case "baseline":
            return [Finished(reason="baseline_failed", detail=why)]
        case "screen":
            lost = Outcome(status="crashed", detail=why)
            return [Screened(trial=task.trial, outcome=lost, reason=why)]
        case "validate":
            failed = Outcome(status="crashed", detail=f"during validation: {why}")
            skipped = QualityChecked(
                trial=task.trial, verdict="skipped", threshold=1.0, reason=f"not checked: {why}"
            )
            validated = Validated(trial=task.trial, failure=failed)
            return [skipped, validated] if task.quality_check else [validated]
        case "promote":
            return []  # nothing measured is lost: the planner queues the promotion again
        case "burst":
            state = RunState.replay(before, study.objective)
            assert state.incumbent is not None
            return [unmeasured(study, state.incumbent, f"the burst check's server {why}")]
