"""The loop's decisions: a pure function of the run's state, the study and the time. Every
action is reached from a real run's ledger (small-tune), cut where the action comes next."""

from __future__ import annotations

from datetime import datetime, timedelta

from kneepoint.config import load_study
from kneepoint.load.objective import rules
from kneepoint.records.actions import CheckBurst, CheckQuality, Promote, Screen, Validate
from kneepoint.records.ledger import (
    Event,
    Finished,
    Proposed,
    QualityChecked,
    RunStarted,
    Screened,
    Validated,
)
from kneepoint.records.proposal import Pruning
from kneepoint.records.study import StudySpec
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.tune.decide import (
    Action,
    Done,
    MeasureBaseline,
    Propose,
    Start,
    Stop,
    budget_stop,
    next_action,
)
from kneepoint.tune.proposers import history
from tests.support.synthetic_space import candidate

from .conftest import QUICKSTART, TuneRun

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
    """Under ``tuning.stop: predicted`` (the budget's stop: tests/test_budget_stop.py)."""
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    study = load_study(small_run.folder / "study.yaml", ["tuning.stop=predicted"])
    state = RunState.replay(events[:2])  # started, baseline measured
    assert state.pruning is not None and isinstance(next_action(state, study, NOW), Propose)
    state.pruning = Pruning(candidates=(candidate("async_scheduling", "to", 1.01, True),))
    action = next_action(state, study, NOW)
    assert isinstance(action, Stop) and action.finished.reason == "nothing_worth_trying"
    assert action.finished.detail.startswith(
        "nothing left worth trying: the best move left, async_scheduling to True, is predicted "
        "at 1.01x"
    )


def _events(run: TuneRun) -> list[Event]:
    return Ledger(run.folder / "ledger.jsonl").read()


def _action(events: list[Event], study: StudySpec) -> Action:
    return next_action(RunState.replay(events, study.objective), study, NOW)


def test_a_proposed_trial_is_screened_and_a_finalist_validated_then_promoted(
    small_run: TuneRun,
) -> None:
    events, study = _events(small_run), load_study(small_run.folder / "study.yaml")
    kinds = [e.event for e in events]
    assert kinds[2:6] == ["proposed", "screened", "validated", "promoted"]
    taken = [_action(events[:cut], study) for cut in range(2, 7)]
    assert [type(a) for a in taken] == [Propose, Screen, Validate, Promote, Propose]
    screen, validate, promote = taken[1:4]
    assert (screen, validate, promote) == (Screen(trial=1), Validate(trial=1), Promote(trial=1))


def test_a_trial_that_changes_outputs_is_quality_checked_first_and_a_failed_check_ends_it(
    small_run: TuneRun,
) -> None:
    events, study = _events(small_run), load_study(small_run.folder / "study.yaml")
    proposed = events[2]
    assert isinstance(proposed, Proposed)
    checked = [*events[:2], proposed.model_copy(update={"quality_check": True}), events[3]]
    action = _action(checked, study)
    assert isinstance(action, CheckQuality) and action.trial == 1
    verdicts = {"passed": Validate, "skipped": Validate, "failed": Propose}
    for verdict, then in verdicts.items():
        quality = QualityChecked(trial=1, verdict=verdict, threshold=0.95, reason="synthetic")
        assert isinstance(_action([*checked, quality], study), then), verdict


def test_a_trial_not_a_finalist_or_not_promoted_is_over(small_run: TuneRun) -> None:
    events, study = _events(small_run), load_study(small_run.folder / "study.yaml")
    not_finalist = next(e for e in events if isinstance(e, Screened) and not e.finalist)
    cut = events.index(not_finalist) + 1
    assert isinstance(_action(events[:cut], study), Stop), "max_trials: the fourth was the last"
    validated = events[4]
    assert isinstance(validated, Validated) and validated.judgement is not None
    kept = validated.model_copy(
        update={"judgement": validated.judgement.model_copy(update={"promote": False})}
    )
    assert isinstance(_action([*events[:4], kept], study), Propose)


def test_a_real_gain_too_small_to_promote_is_told_at_the_incumbents_objective_as_shown(
    small_run: TuneRun,
) -> None:
    events, study = _events(small_run), load_study(small_run.folder / "study.yaml")
    validated = events[4]
    assert isinstance(validated, Validated) and validated.judgement is not None

    def told(low: float) -> tuple[float | None, bool]:
        judgement = validated.judgement.model_copy(  # type: ignore[union-attr]
            update={"promote": False, "gain_low_rel": low}
        )
        kept = validated.model_copy(update={"judgement": judgement})
        state = RunState.replay([*events[:4], kept], study.objective)
        ((_, outcome),) = history(state)
        return outcome.objective, outcome.gain_shown

    real, noise = told(0.004), told(-0.01)
    assert real[1] and not noise[1]
    assert real[0] == noise[0] == rules(study.objective).value(validated.incumbent)  # type: ignore[arg-type]


def test_a_trial_in_flight_finishes_before_a_budget_stops_the_run(small_run: TuneRun) -> None:
    events = _events(small_run)
    study = load_study(small_run.folder / "study.yaml", ["budget.max_trials=1"])
    assert isinstance(_action(events[:4], study), Validate)  # the one trial, screened
    assert isinstance(_action(events[:6], study), Stop)


def test_the_winner_is_burst_after_the_search_stops_and_the_run_is_then_done(
    small_run: TuneRun,
) -> None:
    events, study = _events(small_run), load_study(small_run.folder / "study.yaml")
    assert [e.event for e in events[-2:]] == ["finished", "burst_checked"]
    assert isinstance(_action(events[:-1], study), CheckBurst)
    assert isinstance(_action(events, study), Done)
