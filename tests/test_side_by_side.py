"""Finalists validated side by side (issue "Step 16", part 3): the workers' planner queues one
validation per live worker for a round's finalists, best screened first, each against the one
incumbent; it plans nothing while any task of a batch is out; once all are in, the best
winner's promotion is queued as a task of its own (a promotion every attempt of which died is
queued again: it measures nothing). Built from a real small-tune ledger, as tests/test_pool.py."""

from __future__ import annotations

from datetime import datetime

from kneepoint.config import knob_catalogue, load_study
from kneepoint.records.actions import Validate
from kneepoint.records.ledger import Event, Proposed, Validated
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.workers.plan import plan
from kneepoint.workers.state import Shared

from .conftest import TuneRun

NOW = datetime(2026, 11, 23, 8, 0).astimezone()
SCREENED = frozenset({"baseline", "trial-1-screen", "trial-2-screen"})


def _screened(small_run: TuneRun) -> tuple[list[Event], RunState, StudySpec]:
    """Trials 1 and 2 proposed in one round against the baseline, both screened finalists."""
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    study = load_study(small_run.folder / "study.yaml")
    first, second = events[2], events[6]
    assert isinstance(first, Proposed) and isinstance(second, Proposed)
    state = RunState.replay([*events[:2], first, second, events[3], events[7]], study.objective)
    return events, state, study


def _shared(state: RunState, planned: frozenset[str], pending: tuple[Task, ...] = ()) -> Shared:
    return Shared(state, (), pending, planned, batches=2)


def _won(validated: Event, trial: int, capacity_rps: float) -> Validated:
    assert isinstance(validated, Validated) and validated.challenger is not None
    challenger = validated.challenger.model_copy(update={"capacity_rps": capacity_rps})
    return validated.model_copy(update={"trial": trial, "challenger": challenger})


def test_two_workers_validate_two_finalists_side_by_side(small_run: TuneRun) -> None:
    _, state, study = _screened(small_run)
    tasks = plan(_shared(state, SCREENED), study, knob_catalogue(), 2, NOW).tasks
    assert {t.action.step for t in tasks} == {"validate"}
    assert {t.trial for t in tasks} == {1, 2} and {t.batch for t in tasks} == {3}
    [alone] = plan(_shared(state, SCREENED), study, knob_catalogue(), 1, NOW).tasks
    assert alone.action.step == "validate"


def test_nothing_is_planned_while_a_task_of_the_batch_is_out(small_run: TuneRun) -> None:
    events, state, study = _screened(small_run)
    planned = SCREENED | {"trial-1-validate", "trial-2-validate"}
    state.apply(_won(events[8], 2, 100.0))  # trial 2 is in and won; trial 1 still validating
    out = Task(action=Validate(trial=1), generation=0, batch=3)
    decided = plan(_shared(state, planned, (out,)), study, knob_catalogue(), 2, NOW)
    assert decided.tasks == () and decided.finished is None


def test_the_best_winner_is_promoted_by_a_task_of_its_own(small_run: TuneRun) -> None:
    events, state, study = _screened(small_run)
    planned = SCREENED | {"trial-1-validate", "trial-2-validate"}
    state.apply(_won(events[8], 1, 110.0))
    state.apply(_won(events[8], 2, 100.0))
    [promote] = plan(_shared(state, planned), study, knob_catalogue(), 2, NOW).tasks
    assert (promote.action.step, promote.trial, promote.key) == ("promote", 1, "trial-1-promote")
    again = plan(_shared(state, planned | {promote.key}), study, knob_catalogue(), 2, NOW)
    assert [t.key for t in again.tasks] == [promote.key], "a lost promotion is queued again"
