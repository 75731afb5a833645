"""A shared study's state as the loop's ``RunState``: its tasks' events, in the order the run
took them, replayed through ``RunState.apply`` (the one state builder), so the workers' planner
reads the incumbent, its knee, the trials and their outcomes, the budget and what is left
worth trying exactly as ``kneepoint tune`` does, and the events are the run's ledger.

The order: batch by batch (a batch is queued by one planning and the next is planned once all
of it is in), each round's trials proposed first, then what each task recorded, by trial. A
task every attempt of which failed (its workers died ``max_retry + 1`` times) is read as a
crashed trial: the configuration may be what kills them. A validation split over GPUs is
judged once all its parts are in (``kneepoint.policies.judge.verdict``, as ``kneepoint tune``
judges it), its Validated recorded after its last part. Promotions close the finalists of their
round still waiting, superseded (``RunState.apply``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from kneepoint import __version__
from kneepoint.policies.judge import judged, outrun
from kneepoint.records import (
    BaselinePart,
    CheckBurst,
    CheckQuality,
    Event,
    Finished,
    JoinBaseline,
    MeasureRepeats,
    Outcome,
    Promote,
    Proposed,
    QualityChecked,
    RunStarted,
    Screen,
    Screened,
    SearchKnee,
    StudySpec,
    Task,
    Validate,
    Validated,
    ValidationPart,
)
from kneepoint.run import RunState, study_digest
from kneepoint.tune import unmeasured
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
    """Device time along the run's critical path: each batch's tasks side by side on its
    workers (``side_by_side``), summed. With one worker it is the device time itself."""
    parts: Mapping[int, tuple[ValidationPart, ...]] = field(default_factory=dict)
    """The validation parts measured so far, by trial."""
    baseline_parts: tuple[BaselinePart, ...] = ()
    """The baseline's knee search and repeats measured so far, before its Baseline."""


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
    parts = _Parts({}, [])
    batches = sorted({a.task.batch for a in tasks})
    for batch in batches:
        events += _batch_events(study, sorted(_of_batch(tasks, batch), key=_order), events, parts)
    if finished is not None and not any(isinstance(e, Finished) for e in events):
        events.append(finished)  # a stop with no burst check after it
    state = RunState.replay(events, study.objective)
    return Shared(
        state,
        tuple(events),
        tuple(a.task for a in tasks if a.pending),
        frozenset(a.task.key for a in tasks),
        max((a.task.batch for a in tasks), default=0),
        sum(side_by_side(_of_batch(tasks, b)) for b in batches),
        parts.validation,
        tuple(parts.baseline),
    )


@dataclass(frozen=True)
class _Parts:
    """Measurements that become events once all of their kind are in."""

    validation: dict[int, tuple[ValidationPart, ...]]
    baseline: list[BaselinePart]


def side_by_side(batch: list[Attempts]) -> float:
    """How long a batch's tasks took on its workers: each, in the order queued, on the GPU
    free first (as workers claim them); with no more tasks than GPUs, the longest task."""
    free = [0.0] * max(a.task.workers for a in batch)
    for a in batch:
        spent = a.result.device_s if a.result is not None else 0.0
        free[free.index(min(free))] += spent
    return max(free)


def _of_batch(tasks: list[Attempts], batch: int) -> list[Attempts]:
    return [a for a in tasks if a.task.batch == batch]


def _order(attempts: Attempts) -> tuple[int, int]:
    match attempts.task.action:
        case Validate(repeats=(first, _)) | MeasureRepeats(repeats=(first, _)):
            return attempts.task.trial, first
    return attempts.task.trial, 0


def _batch_events(
    study: StudySpec,
    batch: list[Attempts],
    before: list[Event],
    parts: _Parts,
) -> list[Event]:
    """A batch's events: its round's trials proposed, then each task's record; a trial's
    validation parts (added to ``parts``), judged after its last one in the batch; the
    baseline's parts (added to ``parts``: a task of its own makes the Baseline of them)."""
    events: list[Event] = [
        Proposed(trial=a.task.trial, proposal=a.task.proposal, quality_check=a.task.quality_check)
        for a in batch
        if isinstance(a.task.action, Screen) and a.task.proposal is not None
    ]
    for attempts in batch:
        task = attempts.task
        if isinstance(task.action, CheckBurst):
            assert task.action.stopped is not None
            events.append(task.action.stopped)
        if attempts.pending:
            continue
        result = attempts.result
        if result is not None and result.baseline_part is not None:
            parts.baseline.append(result.baseline_part)
            continue
        if isinstance(task.action, Promote):
            events += _closed_by(study, task.trial, [*before, *events], parts.validation)
        if not isinstance(task.action, Validate):
            events += recorded(study, attempts, [*before, *events])
            continue
        validation = parts.validation
        validation[task.trial] = (*validation.get(task.trial, ()), part_of(attempts))
        mine = [
            a for a in batch if isinstance(a.task.action, Validate) and a.task.trial == task.trial
        ]
        if attempts is mine[-1] and not any(a.pending for a in mine):
            known = RunState.replay([*before, *events], study.objective).incumbent_by_repeat
            validated = judged(study, task.trial, validation[task.trial], known)
            events += [validated] if validated is not None else []
    return events


def _closed_by(
    study: StudySpec,
    winner: int,
    history: list[Event],
    validation: Mapping[int, tuple[ValidationPart, ...]],
) -> list[Event]:
    """The validations part-way through that ``winner``'s promotion closes, each with its
    verdict (``kneepoint.policies.judge.verdict.outrun``: the plan let the promotion go ahead
    only once every one of them was below it), so that their repeats stay in the run's device
    time."""
    state = RunState.replay(history, study.objective)
    won, known = state.trials[winner].validated, state.incumbent_by_repeat
    closed = (
        outrun(study, t.trial, validation[t.trial], won, known)
        for t in state.open_trials()
        if t.trial != winner and t.validated is None and t.trial in validation
    )
    return [v for v in closed if v is not None]


def part_of(attempts: Attempts) -> ValidationPart:
    """A validation task's part; for one every attempt of which died, its failure."""
    task, result = attempts.task, attempts.result
    if result is not None and result.part is not None:
        return result.part
    assert isinstance(task.action, Validate) and task.action.repeats is not None
    why = _lost(attempts) if result is None else (result.failure or "not measured")
    failed = Outcome(status="crashed", detail=f"during validation: {why}")
    first, n = task.action.repeats
    return ValidationPart(trial=task.trial, first_repeat=first, repeats=n, failure=failed)


def _lost(attempts: Attempts) -> str:
    return (
        f"lost: the {attempts.failed} workers that ran it died or went silent "
        "(it may be what kills them)"
    )


def recorded(study: StudySpec, attempts: Attempts, before: list[Event]) -> list[Event]:
    """What a finished task recorded; for one every attempt of which died, its failure."""
    task, result = attempts.task, attempts.result
    if result is not None and result.events:
        return list(result.events)
    why = _lost(attempts) if result is None else (result.failure or "not measured")
    match task.action:
        case SearchKnee() | MeasureRepeats() | JoinBaseline():  # the run's failure, said once
            finished = any(isinstance(e, Finished) for e in before)
            return [] if finished else [Finished(reason="baseline_failed", detail=why)]
        case Screen():
            lost = Outcome(status="crashed", detail=why)
            return [Screened(trial=task.trial, outcome=lost, reason=why)]
        case CheckQuality():  # the trial ends: its configuration may be what kills workers
            failed = Outcome(status="crashed", detail=f"during its quality check: {why}")
            skipped = QualityChecked(
                trial=task.trial, verdict="skipped", threshold=1.0, reason=f"not checked: {why}"
            )
            return [skipped, Validated(trial=task.trial, failure=failed)]
        case Validate():
            raise AssertionError("a validation's parts are judged together (part_of)")
        case Promote():
            return []  # nothing measured is lost: the planner queues the promotion again
        case CheckBurst():
            state = RunState.replay(before, study.objective)
            assert state.incumbent is not None
            return [unmeasured(study, state.incumbent, f"the burst check's server {why}")]
        case _:
            assert_never(task.action)
