"""A stop that reads the budget: a move's prediction is a prior with a spread, a trial is worth
its share of the budget left while its expected gain pays for it, and the search stops on
trials in a row that promoted nothing (or on the budget), saying which (issue "Step 16")."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from kneepoint.config import load_study
from kneepoint.policies.search.coordinate import CoordinateDescent
from kneepoint.policies.search.worth import (
    PRIOR_SPREAD_LOG,
    RECORDED_ERRORS,
    chance,
    expected_gain,
    pays,
    spread_log,
    words,
)
from kneepoint.records.actions import Validate
from kneepoint.records.engine import EngineConfig
from kneepoint.records.ledger import Event, Proposed, Screened
from kneepoint.records.proposal import Outcome, Prediction, Proposal, Pruning, TrialPrice
from kneepoint.records.study import StudySpec
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.tune.budget import cost_share, expected_step_s, own_errors, trial_price
from kneepoint.tune.decide import Propose, Stop, next_action
from kneepoint.tune.proposers import run_proposer
from kneepoint.tune.standing import standing
from tests.support.synthetic_space import candidate, drive, make_space

from .conftest import SMALL, TuneRun, kneepoint_main

NOW = datetime(2026, 11, 23, 8, 0).astimezone()


def price(cost: float, floor: float = 0.03, spread: float = PRIOR_SPREAD_LOG) -> TrialPrice:
    return TrialPrice(floor_rel=floor, spread_log=spread, cost_share=cost)


def test_the_prior_spread_is_the_recorded_errors_root_mean_square() -> None:
    logs = [math.log(measured / predicted) for _, predicted, measured, _ in RECORDED_ERRORS]
    rms = math.sqrt(sum(e * e for e in logs) / len(logs))
    assert round(rms, 3) == PRIOR_SPREAD_LOG
    assert spread_log([]) == pytest.approx(PRIOR_SPREAD_LOG)
    # the 2.50x KV move that measured 0.88x widens the spread; a run of good calls narrows it
    assert spread_log([math.log(0.88 / 2.50)]) > 4 * PRIOR_SPREAD_LOG
    assert spread_log([0.01] * 8) < 0.5 * PRIOR_SPREAD_LOG


@pytest.mark.parametrize("ratio", [0.85, 1.0, 1.05, 1.3])
def test_the_expected_gain_is_what_sampling_the_prior_gives(ratio: float) -> None:
    rng, p, n = random.Random(7), price(0.1), 200_000
    draws = [ratio * math.exp(p.spread_log * rng.gauss(0.0, 1.0)) for _ in range(n)]
    beats = [x for x in draws if x > 1.0 + p.floor_rel]
    assert chance(p, ratio) == pytest.approx(len(beats) / n, abs=0.005)
    assert expected_gain(p, ratio) == pytest.approx(sum(x - 1.0 for x in beats) / n, abs=0.002)


def test_a_move_inside_the_noise_pays_with_the_night_ahead_not_at_its_end() -> None:
    # kv fp8 re-priced to 1.05x on a held-out bandwidth-bound case measured +7.3%
    assert pays(price(0.05), 1.05) and pays(price(1.0), 1.05)
    assert pays(price(0.05), 0.95) and not pays(price(1.0), 0.95)
    assert not pays(price(0.01), 0.6), "a move the readings say breaks a limit stays untried"
    assert words(price(0.04), 1.01).startswith("a 43% chance of beating the 3.0% floor, 5.")


def test_a_walk_tries_a_step_inside_the_noise_while_it_pays() -> None:
    flat = (candidate("async_scheduling", "to", 1.01, True),)
    base = make_space().model_copy(update={"candidates": flat})
    assert CoordinateDescent(base, min_gain=0.03).ask() is None, "no price: passed over"
    night = base.model_copy(update={"price": price(0.02)})
    proposal = CoordinateDescent(night, min_gain=0.03).ask()
    assert proposal is not None and proposal.changes == {"async_scheduling": True}
    assert proposal.reason.endswith("; tried for what it may gain: " + words(price(0.02), 1.01))
    doomed = base.model_copy(update={"price": price(0.02), "candidates": (
        candidate("async_scheduling", "to", 0.6, True),)})  # fmt: skip
    assert CoordinateDescent(doomed, min_gain=0.03).ask() is None


def _events(run: TuneRun) -> list[Event]:
    return Ledger(run.folder / "ledger.jsonl").read()


def test_a_halving_between_two_measurements_must_clear_the_floor_itself() -> None:
    """The quickstart's walk: 512 sequences measured 0.98x of the 1.07x predicted; its halving
    back toward 256 (re-priced 0.95x) lies between two measurements, so the price's spread does
    not buy it a trial. A step past a wall is still bisected toward it."""
    seqs = (candidate("max_num_seqs", "up", 1.073),)
    night = make_space(incumbent_objective=10.0, candidates=seqs, price=price(0.02))
    assert pays(price(0.02), 0.95), "on the price list alone it would be tried"

    def flat_past_256(config: EngineConfig) -> Outcome:
        return Outcome(status="ok", objective=9.84, feasible=True)

    walked = [p.params["to"] for p, _ in drive(CoordinateDescent(night, min_gain=0.03), 9,
                                               flat_past_256)]  # fmt: skip
    assert walked == [512]

    def dies_past_400(config: EngineConfig) -> Outcome:
        if (config.max_num_seqs or 256) > 400:
            return Outcome(status="startup_failed", detail="CUDA out of memory")
        return Outcome(status="ok", objective=10.0, feasible=True)

    walled = drive(CoordinateDescent(night, min_gain=0.03), 9, dies_past_400)
    assert [p.params["to"] for p, _ in walled][:2] == [512, 362]


def test_a_budget_stop_proposes_what_a_predicted_stop_ends_on(small_run: TuneRun) -> None:
    """The same state: "predicted" stops (nothing beats the noise), "budget" goes on."""
    events = _events(small_run)
    flat = Pruning(candidates=(candidate("async_scheduling", "to", 1.01, True),))
    for stop, then in (("predicted", Stop), ("budget", Propose)):
        study = load_study(small_run.folder / "study.yaml", [f"tuning.stop={stop}"])
        state = RunState.replay(events[:2], study.objective)
        state.pruning = flat
        assert isinstance(next_action(state, study, NOW), then), stop


def test_with_every_knob_ruled_out_a_budget_stop_moves_the_long_shots(
    small_run: TuneRun,
) -> None:
    """No candidate left but knobs ruled out by their own rules: "budget" moves those (rag
    stopped with 56% of its budget left where the ruled-out chunk budget and cap gave +16%),
    "predicted" and a pruning with no long shot stop."""
    events = _events(small_run)
    shot = candidate("max_num_batched_tokens", "to", 1.0)
    cases = (("budget", (shot,), Propose), ("predicted", (shot,), Stop), ("budget", (), Stop))
    for stop, shots, then in cases:
        study = load_study(small_run.folder / "study.yaml", [f"tuning.stop={stop}"])
        state = RunState.replay(events[:2], study.objective)
        state.pruning = Pruning(long_shots=shots)
        action = next_action(state, study, NOW)
        assert isinstance(action, then), (stop, shots)
        if isinstance(action, Stop):
            assert action.finished.reason == "nothing_to_try"
            continue
        (proposal,) = run_proposer(study, state, None).batch(1)
        assert proposal.proposer == "long-shot" and proposal.prediction.capacity_ratio == 1.0
        assert set(proposal.changes) == {"max_num_batched_tokens"}


def _flat_trial(number: int, objective: float) -> list[Event]:
    prediction = Prediction(capacity_ratio=1.1, reason="synthetic")
    proposal = Proposal(config=make_space().incumbent.replace(max_num_seqs=100 + number),
                        changes={"max_num_seqs": 100 + number}, proposer="coordinate",
                        reason="synthetic", prediction=prediction)  # fmt: skip
    outcome = Outcome(status="ok", objective=objective, feasible=True)
    return [Proposed(trial=number, proposal=proposal),
            Screened(trial=number, outcome=outcome, finalist=False, reason="no gain",
                     device_s=600.0)]  # fmt: skip


def test_trials_in_a_row_that_promote_nothing_stop_the_search(small_run: TuneRun) -> None:
    events = _events(small_run)
    study = load_study(small_run.folder / "study.yaml",
                       ["tuning.patience=3", "budget.max_trials=20"])  # fmt: skip
    state = RunState.replay(events[:2], study.objective)
    assert state.incumbent_objective is not None
    for number in (1, 2):
        for event in _flat_trial(number, state.incumbent_objective * 0.99):
            state.apply(event)
    assert isinstance(next_action(state, study, NOW), Propose)
    for event in _flat_trial(3, state.incumbent_objective):
        state.apply(event)
    action = next_action(state, study, NOW)
    assert isinstance(action, Stop) and action.finished.reason == "diminishing_returns"
    assert action.finished.detail.startswith(
        "3 trials in a row since the baseline promoted nothing (the best measured 1.00x"
    )
    assert "tuning.patience 3" in action.finished.detail
    assert len(state.measured_moves()) == 3  # each predicted 1.1x, measured ~1x
    assert own_errors(state) == [], "the space's proposer was priced before any of them"


def test_a_trial_costs_its_share_of_what_is_left(small_run: TuneRun) -> None:
    events = _events(small_run)
    study = load_study(small_run.folder / "study.yaml",
                       ["budget.max_trials=11", "budget.max_device_hours=100"])  # fmt: skip
    state = RunState.replay(events[:2], study.objective)
    assert cost_share(state, study) == pytest.approx(1 / 11)
    hours = load_study(small_run.folder / "study.yaml",
                       ["budget.max_trials=1000", "budget.max_device_hours=1"])  # fmt: skip
    assert state.baseline is not None
    expected = state.baseline.device_s / (3600.0 - state.baseline.device_s)
    assert cost_share(state, hours) == pytest.approx(min(1.0, expected))
    predicted = load_study(small_run.folder / "study.yaml", ["tuning.stop=predicted"])
    assert trial_price(state, predicted) is None


def _night(run: TuneRun, pruning: Pruning) -> tuple[StudySpec, RunState]:
    """small-tune's baseline under a night's budget stop, with ``pruning``: the study and
    the state."""
    night = ["tuning.stop=budget", "budget.max_trials=30", "tuning.patience=30"]
    study = load_study(run.folder / "study.yaml", night)
    state = RunState.replay(_events(run)[:2], study.objective)
    state.pruning = pruning
    return study, state


def _screen_each(
    study: StudySpec, state: RunState, trials: int, ratio: Callable[[Proposal], float]
) -> list[Proposal]:
    """The run's proposals one at a time, each screened at ``ratio`` of the incumbent, until
    ``trials`` are run, the proposer runs dry or a screen reads above 1.05x."""
    asked: list[Proposal] = []
    reference = state.incumbent_objective
    assert reference is not None
    for number in range(1, trials + 1):
        batch = run_proposer(study, state, None).batch(1)
        if not batch:
            break
        (proposal,) = batch
        asked.append(proposal)
        measured = ratio(proposal)
        state.apply(Proposed(trial=number, proposal=proposal))
        state.apply(Screened(trial=number, outcome=Outcome(status="ok",
                                                           objective=reference * measured,
                                                           feasible=True),
                             finalist=False, reason="synthetic", device_s=60.0))  # fmt: skip
        if measured > 1.05:
            break
    return asked


def test_long_shots_measured_alone_are_tried_together_with_the_walks_moves(
    small_run: TuneRun,
) -> None:
    """Cache-bound's miss (benchmarks/regret.py, 2026-11-28): 1,024 sequences and fp8 KV, each
    a long shot inside the noise alone, together in the grid's optimum. Once the walk and
    the long shots are spent, every move that was no loss alone is tried together, once."""
    study, state = _night(small_run, Pruning(
        candidates=(candidate("async_scheduling", "to", 1.05, True),),
        long_shots=(candidate("kv_cache_dtype", "to", 1.0), candidate("enforce_eager",
                                                                     "to", 1.0)),
    ))  # fmt: skip
    asked = _screen_each(study, state, 11, lambda p: 0.97 if p.proposer == "combination" else 1.0)
    kinds = [p.proposer for p in asked]
    assert kinds[0] == "coordinate" and "long-shot" in kinds
    assert kinds.count("combination") == 1, kinds
    together = kinds.index("combination")
    assert all(kind.startswith("optuna-") for kind in kinds[together + 1 :]), kinds
    singles = {name for p in asked[:together] for name in p.changes}
    assert set(asked[together].changes) == singles and len(singles) == 3


def test_a_step_the_budget_left_cannot_pay_for_is_not_begun(small_run: TuneRun) -> None:
    """peer_autotune on vLLM's CPU build (2026-11-29): a validation begun with 86 s of the
    device-hour budget left took 272 s and ended the run 24% past its budget."""
    events = _events(small_run)
    finalist = next(i for i, e in enumerate(events) if isinstance(e, Screened) and e.finalist)
    study = load_study(small_run.folder / "study.yaml")
    state = RunState.replay(events[: finalist + 1], study.objective)
    assert isinstance(next_action(state, study, NOW), Validate)
    expected = expected_step_s(state, study, "validation")
    assert expected is not None and expected > 0
    hours = (state.device_s + expected / 2) / 3600.0
    short = load_study(small_run.folder / "study.yaml", [f"budget.max_device_hours={hours}"])
    action = next_action(state, short, NOW)
    assert isinstance(action, Stop) and action.finished.reason == "max_device_hours"
    trial = events[finalist].trial  # type: ignore[attr-defined]
    assert f"left do not cover trial {trial}'s validation (~{expected:.0f} s" in (
        action.finished.detail
    )
    state.apply(action.finished)  # the finalist stays open: its validation was never begun
    assert state.finished == action.finished and state.trials[trial].next_step() == "validate"


def test_a_run_the_budget_stops_before_a_validation_ends_well_and_says_so(
    small_run: TuneRun, tmp_path: Path
) -> None:
    """A finalist the budget cannot validate is left open: the run finishes, exits 0 and its
    report says why that trial was not validated."""
    events = _events(small_run)
    finalist = next(i for i, e in enumerate(events) if isinstance(e, Screened) and e.finalist)
    study = load_study(small_run.folder / "study.yaml")
    state = RunState.replay(events[: finalist + 1], study.objective)
    expected = expected_step_s(state, study, "validation")
    assert expected is not None
    hours = (state.device_s + expected / 2) / 3600.0
    done = kneepoint_main("tune", SMALL, "--runs-dir", tmp_path,
                          "--set", f"budget.max_device_hours={hours}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (folder,) = tmp_path.iterdir()
    report = (folder / "report.md").read_text()
    assert "left unvalidated: the run stopped (max_device_hours)" in report


def test_a_candidate_whose_step_measured_no_loss_steps_on_once_the_rest_is_spent(
    small_run: TuneRun,
) -> None:
    """Scheduling-bound (benchmarks/regret.py, 2026-12-03): from 128 sequences the walk's
    256 validated +1.9% [-2.3%, +6.1%], not shown, the long shots and their combination
    measured nothing, and the run ended `exhausted` with 6 of its 8 device-hours unspent
    while 512 sequences measure +7%. A walked knob whose rule leans the way its last step
    measured no loss steps on past it, as a long shot does, once everything else is spent."""
    study, state = _night(small_run, Pruning(
        candidates=(candidate("max_num_seqs", "up", 1.05),),
        long_shots=(candidate("kv_cache_dtype", "to", 1.0),),
    ))  # fmt: skip
    inside = 1.0 + study.tuning.min_effect_rel * 0.6  # +1.9% against scheduling-bound's 3%
    walk: list[int] = []

    def ratio(proposal: Proposal) -> float:
        seqs = proposal.config.max_num_seqs or 0
        walk.append(seqs)  # the walk's first step comes first
        return 1.07 if seqs > walk[0] else inside if seqs == walk[0] else 1.0

    asked = _screen_each(study, state, 11, ratio)
    walked = walk[0]
    kinds = [p.proposer for p in asked]
    assert kinds[0] == "coordinate" and kinds[-2] == "combination", kinds
    last = asked[-1]
    assert last.proposer == "long-shot" and last.changes == {"max_num_seqs": 2 * walked}, kinds
    assert "stepping on" in last.reason


def test_with_every_move_spent_the_sampler_takes_over_until_the_patience(
    small_run: TuneRun,
) -> None:
    """Code-edits and bandwidth-bound (benchmarks/regret.py, 2026-12-03) ended `exhausted` at
    9 of 12 trials with 6.0 and 1.9 of 8 device-hours left: the walk, the long shots, their
    combination and the step-ons spent. With budget left Optuna over every knob takes over,
    and the patience or the budget ends the run, not the proposer running dry."""
    study, state = _night(small_run, Pruning(
        candidates=(candidate("async_scheduling", "to", 1.05, True),),
        long_shots=(candidate("max_num_batched_tokens", "to", 1.0),),
    ))  # fmt: skip
    kinds = [p.proposer for p in _screen_each(study, state, 9, lambda _: 1.0)]
    assert kinds[:4] == ["coordinate", "long-shot", "long-shot", "combination"], kinds
    assert len(kinds) == 9 and all(k.startswith("optuna-") for k in kinds[4:]), kinds


def test_a_run_past_its_device_hours_prints_no_time_left(small_run: TuneRun) -> None:
    events = _events(small_run)
    screened = next(i for i, e in enumerate(events) if isinstance(e, Screened))
    study = load_study(small_run.folder / "study.yaml")
    state = RunState.replay(events[: screened + 1], study.objective)
    trial = state.trials[events[screened].trial]  # type: ignore[attr-defined]
    spent_h = state.device_s / 3600.0
    past = load_study(small_run.folder / "study.yaml", [f"budget.max_device_hours={spent_h / 1.1}"])
    line = standing(state, past, trial, [60.0], NOW)
    assert line.endswith("~0s left"), line
    assert standing(state, study, trial, [60.0], NOW).endswith("~3m00s left")  # 3 trials at 60 s
