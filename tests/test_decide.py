"""The loop's decisions: a pure function of the run's state, the study and the time."""

from __future__ import annotations

from datetime import datetime, timedelta

from kneepoint.config import load_study
from kneepoint.records.ledger import Finished, RunStarted
from kneepoint.records.proposal import Pruning
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.tune.decide import (
    Done,
    MeasureBaseline,
    Propose,
    Start,
    Stop,
    budget_stop,
    next_action,
)

from .conftest import QUICKSTART, TuneRun
from .synthetic_space import candidate

NOW = datetime(2026, 11, 23, 8, 0).astimezone()


def test_a_new_run_starts_then_measures_its_baseline_and_a_finished_one_is_done() -> None:
    study, state = load_study(QUICKSTART), RunState()
    assert isinstance(next_action(state, study, NOW), Start)
    state.apply(RunStarted(study_name=study.name, seed=0, kneepoint_version="x",
                           started_at=NOW))  # fmt: skip
    assert isinstance(next_action(state, study, NOW), MeasureBaseline)
    state.apply(Finished(reason="baseline_failed", detail="it did not start"))
    assert isinstance(next_action(state, study, NOW), Done)


def test_a_deadline_that_passed_stops_the_run() -> None:
    study = load_study(QUICKSTART, ["budget.deadline='2026-11-23T09:00:00+00:00'"])
    state = RunState()
    state.apply(RunStarted(study_name=study.name, seed=0, kneepoint_version="x",
                           started_at=NOW - timedelta(hours=1)))  # fmt: skip
    late = datetime(2026, 11, 23, 9, 30).astimezone()
    stop = budget_stop(state, study, late)
    assert stop is not None and stop.reason == "deadline"
    assert isinstance(Stop(stop), Stop)


def test_it_stops_when_no_candidate_left_is_worth_a_trial(small_run: TuneRun) -> None:
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    study = load_study(small_run.folder / "study.yaml")
    state = RunState.replay(events[:2])  # started, baseline measured
    assert state.pruning is not None and isinstance(next_action(state, study, NOW), Propose)
    state.pruning = Pruning(candidates=(candidate("async_scheduling", "to", 1.01, True),))
    action = next_action(state, study, NOW)
    assert isinstance(action, Stop) and action.finished.reason == "nothing_worth_trying"
    assert action.finished.detail.startswith(
        "nothing left worth trying: the best move left, async_scheduling to True, is predicted "
        "at 1.01x"
    )
