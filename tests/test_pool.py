"""A round of several trials (a pool's, ``kneepoint.tune.dispatch``) in the run's state and in
``kneepoint tune``'s decisions on one GPU (``next_action``): the open screens first, then the
finalists one at a time, best screened first; the best winner is promoted, which closes the
rest of its round. The state (``RunState.apply``) holds several open trials and still refuses
an event that cannot follow. Built from a real small-tune ledger."""

from __future__ import annotations

from datetime import datetime

import pytest

from kneepoint.config import load_study
from kneepoint.records.actions import Promote, Screen, Validate
from kneepoint.records.ledger import Event, Finished, Promoted, Proposed, Screened, Validated
from kneepoint.records.study import StudySpec
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState, StateError
from kneepoint.tune.decide import Propose, Stop, next_action
from kneepoint.tune.execute import outrun_gain

from .conftest import TuneRun

NOW = datetime(2026, 11, 23, 8, 0).astimezone()


def _run(small_run: TuneRun) -> tuple[list[Event], StudySpec]:
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    return events, load_study(small_run.folder / "study.yaml")


def _round(events: list[Event]) -> list[Event]:
    """Started, baseline, and trials 1 and 2 proposed together (both against the baseline)."""
    first, second = events[2], events[6]
    assert isinstance(first, Proposed) and isinstance(second, Proposed)
    return [*events[:2], first, second]


def test_tune_proposes_one_configuration_at_a_time(small_run: TuneRun) -> None:
    events, study = _run(small_run)
    state = RunState.replay(events[:2], study.objective)
    assert next_action(state, study, NOW) == Propose(1)


def test_a_rounds_screens_come_first_then_its_best_finalist(small_run: TuneRun) -> None:
    events, study = _run(small_run)
    state = RunState.replay(_round(events), study.objective)
    assert next_action(state, study, NOW) == Screen(trial=1)
    second, first = events[7], events[3]
    assert isinstance(first, Screened) and isinstance(second, Screened)
    assert first.finalist and second.finalist
    state.apply(second)  # screens finish in any order
    assert next_action(state, study, NOW) == Screen(trial=1)
    state.apply(first)
    best = max((1, 2), key=lambda n: state.trials[n].measured_objective() or 0.0)
    validate = next_action(state, study, NOW)
    assert isinstance(validate, Validate) and validate.trial == best


def _won(validated: Event, trial: int, capacity_rps: float) -> Validated:
    """``validated`` (a winner's) as trial ``trial``'s, its challenger at ``capacity_rps``."""
    assert isinstance(validated, Validated) and validated.challenger is not None
    challenger = validated.challenger.model_copy(update={"capacity_rps": capacity_rps})
    return validated.model_copy(update={"trial": trial, "challenger": challenger})


def test_finalists_validated_beside_each_other_promote_the_best_winner(
    small_run: TuneRun,
) -> None:
    events, study = _run(small_run)
    state = RunState.replay([*_round(events), events[3], events[7]], study.objective)
    winner = events[8]  # trial 2's validation, a winner over the baseline
    assert isinstance(winner, Validated) and winner.promote and winner.challenger is not None
    top = winner.challenger.capacity_rps
    assert top is not None
    state.apply(_won(winner, 1, top * 1.1))  # trial 1 validated beside it, and higher
    state.apply(_won(winner, 2, top))
    assert next_action(state, study, NOW) == Promote(trial=1)


def test_a_promotion_closes_the_finalists_left_in_its_round(small_run: TuneRun) -> None:
    events, study = _run(small_run)
    state = RunState.replay([*_round(events), events[3], events[7]], study.objective)
    validated, promoted = events[8], events[9]  # trial 2's, promoted over the baseline here
    state.apply(validated)
    state.apply(promoted)
    other = state.trials[1].screened
    assert other is not None and not other.finalist
    assert other.reason.startswith("superseded: screened +")
    assert state.open_trials() == [] and state.incumbent == state.trials[2].proposal.config
    assert isinstance(next_action(state, study, NOW), Propose | Stop)


def test_a_rounds_runner_up_winner_carries_its_validated_gain(small_run: TuneRun) -> None:
    """Two finalists of a round both won their validations; the better was promoted. The
    runner-up's move, proposed again from the new incumbent, carries the gain its validation
    showed (its screen then only has to confirm it); the promoted move and other moves carry
    nothing."""
    events, study = _run(small_run)
    state = RunState.replay([*_round(events), events[3], events[7]], study.objective)
    winner, promoted = events[8], events[9]
    assert isinstance(winner, Validated) and winner.challenger is not None
    assert isinstance(promoted, Promoted) and winner.judgement is not None
    top = winner.challenger.capacity_rps
    assert top is not None
    state.apply(_won(winner, 1, top * 1.1))
    state.apply(_won(winner, 2, top))
    first = state.trials[1].proposal
    state.apply(promoted.model_copy(update={"trial": 1, "config": first.config}))
    runner_up = state.trials[2].proposal
    assert state.trials[2].next_step() is None and state.trials[2].promoted is None
    assert outrun_gain(state, runner_up) == winner.judgement.gain_rel
    assert outrun_gain(state, first) is None
    other = runner_up.model_copy(update={"changes": {"max_num_seqs": 12345}})
    assert outrun_gain(state, other) is None


def test_an_event_that_cannot_follow_is_refused_with_several_trials_open(
    small_run: TuneRun,
) -> None:
    events, study = _run(small_run)
    state = RunState.replay(_round(events), study.objective)
    stop = Finished(reason="max_trials", detail="2 trials run")
    with pytest.raises(StateError, match="a finished event where trial 1 was still open"):
        state.apply(stop)
    with pytest.raises(StateError, match="a proposed event where trial 3 was next"):
        state.apply(events[2])
    with pytest.raises(StateError, match="a validated event where trial 1 was at its screen"):
        state.apply(events[4])
    with pytest.raises(StateError, match="no trial 3 was proposed"):
        state.apply(events[11])
