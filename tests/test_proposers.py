"""The contract every proposer keeps (one suite over coordinate descent, Optuna TPE, ``auto``
(the default: coordinate descent and its combination, then TPE), the walk then its
combination, the long shots alone, then stepping on, and after a walk, and, where
torch is installed, Optuna GP): asks stay in the space, the same seed asks the same, a fresh
proposer replayed with the history asks what the live one asks, failures are outcomes that are
never re-proposed, no configuration is proposed twice, the search ends or stays valid, and a
batch starts with what ``ask`` gives and holds distinct configurations, the same for the same
history.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle

import pytest

from kneepoint.policies.search.combination import Combination
from kneepoint.policies.search.coordinate import CoordinateDescent
from kneepoint.policies.search.known import Known
from kneepoint.policies.search.long_shots import LongShots, ThenLongShots
from kneepoint.policies.search.optuna_search import OptunaProposer
from kneepoint.policies.search.phased import Phased
from kneepoint.policies.search.proposer import Proposer, replay
from kneepoint.policies.search.space import effective
from kneepoint.policies.search.step_ons import StepOns
from kneepoint.policies.search.worth import no_loss_ratio
from kneepoint.records.engine import EngineConfig
from kneepoint.records.proposal import Outcome, Prediction, Proposal, SearchSpace, TrialPrice
from tests.support import synthetic_space
from tests.support.synthetic_space import CANDIDATES, CURRENT, capacity, drive, make_space

Factory = Callable[[SearchSpace, int], Proposer]


def _coordinate(space: SearchSpace, seed: int) -> Proposer:
    return CoordinateDescent(space, seed)


def _tpe(space: SearchSpace, seed: int) -> Proposer:
    return OptunaProposer(space, seed, sampler="tpe", n_startup_trials=4)


def _gp(space: SearchSpace, seed: int) -> Proposer:
    return OptunaProposer(space, seed, sampler="gp", n_startup_trials=4)


def _auto(space: SearchSpace, seed: int) -> Proposer:
    return Phased(_walk_then_combination(space, seed), lambda: _tpe(space, seed))


def _walk_then_combination(space: SearchSpace, seed: int) -> Proposer:
    return Phased(CoordinateDescent(space, seed), lambda: Combination(space, seed))


def _long_shots(space: SearchSpace, _seed: int) -> Proposer:
    return LongShots(space)


def _long_shots_then_step_ons(space: SearchSpace, _seed: int) -> Proposer:
    return Phased(LongShots(space), lambda: StepOns(space))


def _then_long_shots(space: SearchSpace, seed: int) -> Proposer:
    """A walk over two knobs, then the other knobs' long shots (under the budget stop)."""
    walk = space.model_copy(update={"candidates": space.candidates[:2]})
    shots = space.model_copy(update={"candidates": space.candidates[2:]})
    return ThenLongShots(CoordinateDescent(walk, seed), LongShots(shots))


def _auto_then_long_shots(space: SearchSpace, seed: int) -> Proposer:
    """``auto`` over two knobs (its walk, then TPE), the other knobs' long shots beside
    TPE's draws (under the budget stop)."""
    walk = space.model_copy(update={"candidates": space.candidates[:2]})
    shots = space.model_copy(update={"candidates": space.candidates[2:]})
    return ThenLongShots(_auto(walk, seed), LongShots(shots))


def _known(space: SearchSpace, seed: int) -> Proposer:
    """Coordinate descent with an earlier incumbent (half the sequences) known."""
    left = space.incumbent.replace(max_num_seqs=128)
    return Known(CoordinateDescent(space, seed), {left.fingerprint(): capacity(left)})


# Rounds per proposer: enough to leave the random start of the Optuna samplers, few for GP
# (each of its asks fits a Gaussian process).
FACTORIES = [
    pytest.param(_coordinate, 40, id="coordinate"),
    pytest.param(_walk_then_combination, 40, id="walk-then-combination"),
    pytest.param(_tpe, 24, id="optuna-tpe"),
    pytest.param(_auto, 40, id="auto"),
    pytest.param(_long_shots, 20, id="long-shots"),
    pytest.param(_long_shots_then_step_ons, 24, id="long-shots-then-step-ons"),
    pytest.param(_then_long_shots, 30, id="then-long-shots"),
    pytest.param(_auto_then_long_shots, 30, id="auto-then-long-shots"),
    pytest.param(_known, 40, id="known"),
    pytest.param(_gp, 6, id="optuna-gp", marks=pytest.mark.gp),
]
FAILURES = ("startup_failed", "crashed", "timed_out", "invalid_measurement")


def _failing_every_other() -> Callable[[EngineConfig], Outcome]:
    """Every other trial fails, through each kind of failure in turn."""
    statuses = cycle(FAILURES)
    turn = cycle((True, False))

    def objective(config: EngineConfig) -> Outcome:
        if next(turn):
            return Outcome(status=next(statuses), detail="synthetic failure")  # type: ignore[arg-type]
        return capacity(config)

    return objective


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_every_ask_stays_in_the_space(factory: Factory, rounds: int) -> None:
    space = make_space()
    proposer = factory(space, 0)
    history = drive(proposer, rounds)
    assert history and history[-1][0].proposer == proposer.name
    for proposal, _ in history:
        config = proposal.config
        assert EngineConfig.model_validate(config.model_dump()) == config
        changed = config.changes_from(space.incumbent)
        assert changed and set(changed) <= set(space.knob_names())
        assert proposal.changes == {name: new for name, (_, new) in changed.items()}
        for candidate in space.candidates:
            value = effective(config, candidate.knob.name, space)
            assert candidate.knob.domain.contains(value), (candidate.knob.name, value)
        assert proposal.proposer in (
            "coordinate",
            "combination",
            "optuna-tpe",
            "optuna-gp",
            "long-shot",
        )
        assert isinstance(proposal.prediction, Prediction) and proposal.prediction.reason


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_the_same_seed_asks_the_same(factory: Factory, rounds: int) -> None:
    first = drive(factory(make_space(), 7), rounds)
    second = drive(factory(make_space(), 7), rounds)
    assert [p.key() for p, _ in first] == [p.key() for p, _ in second]
    assert [p.params for p, _ in first] == [p.params for p, _ in second]


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
@pytest.mark.parametrize("failing", [False, True], ids=["measured", "with-failures"])
def test_a_replayed_history_asks_what_the_live_proposer_asked(
    factory: Factory, rounds: int, failing: bool
) -> None:
    objective = _failing_every_other() if failing else capacity
    space = make_space()
    live = factory(space, 3)
    history = drive(live, rounds, objective)
    next_live = live.ask()
    assert len(history) >= 3
    for cut in (0, 2, len(history) - 1):
        fresh = replay(factory(space, 3), history[:cut])
        asked = fresh.ask()
        assert asked is not None and asked.key() == history[cut][0].key(), cut
        assert asked.params == history[cut][0].params
        assert asked.prediction == history[cut][0].prediction
    resumed = replay(factory(space, 3), history).ask()
    assert (resumed and resumed.key()) == (next_live and next_live.key())


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_failed_trials_are_outcomes_and_never_proposed_again(factory: Factory, rounds: int) -> None:
    proposer = factory(make_space(), 0)
    history = drive(proposer, rounds, _failing_every_other())
    failed = {p.key() for p, o in history if o.failed}
    assert {o.status for _, o in history} >= set(FAILURES) or len(history) < 8
    assert failed
    later = drive(proposer, rounds)
    assert not failed & {p.key() for p, _ in later}


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_no_configuration_is_proposed_twice(factory: Factory, rounds: int) -> None:
    space = make_space()
    history = drive(factory(space, 1), rounds * 2)
    keys = [p.key() for p, _ in history]
    assert len(keys) == len(set(keys))
    assert space.incumbent.fingerprint() not in keys


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_tell_takes_proposals_made_elsewhere(factory: Factory, rounds: int) -> None:
    space = make_space()
    proposer = factory(space, 0)
    first = proposer.ask()  # asked, then overtaken by outcomes from elsewhere
    assert first is not None
    foreign = [
        _foreign(space.incumbent.replace(max_num_seqs=512, async_scheduling=True)),
        _foreign(space.incumbent.replace(enforce_eager=True)),  # a knob outside the space
        _foreign(space.incumbent.replace(max_num_seqs=4096)),  # beyond the knob's domain
    ]
    history = [(proposal, capacity(proposal.config)) for proposal in foreign]
    for proposal, outcome in history:
        proposer.tell(proposal, outcome)
    history += drive(proposer, rounds)
    keys = [p.key() for p, _ in history[len(foreign) :]]
    assert not set(keys) & {p.key() for p in foreign}
    live_next, fresh_next = proposer.ask(), replay(factory(space, 0), history).ask()
    assert (live_next and live_next.key()) == (fresh_next and fresh_next.key())


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_ask_repeats_itself_until_told(factory: Factory, rounds: int) -> None:
    proposer = factory(make_space(), 0)
    first, again = proposer.ask(), proposer.ask()
    assert first is not None and again is not None and first.key() == again.key()


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
def test_the_search_ends_or_stays_valid(factory: Factory, rounds: int) -> None:
    proposer = factory(make_space(), 0)
    history = drive(proposer, rounds * 2)
    best = max(o.objective or 0.0 for _, o in history)
    assert best > (make_space().incumbent_objective or 0.0)
    if len(history) < rounds * 2:
        assert proposer.ask() is None


@pytest.mark.parametrize(("factory", "rounds"), FACTORIES)
@pytest.mark.parametrize("told", [0, 3], ids=["fresh", "after-3"])
def test_a_batch_starts_with_the_ask_and_holds_distinct_configurations(
    factory: Factory, rounds: int, told: int
) -> None:
    space = make_space()
    history = drive(factory(space, 5), told)
    asked = replay(factory(space, 5), history).ask()
    assert asked is not None
    assert [p.key() for p in replay(factory(space, 5), history).batch(1)] == [asked.key()]
    batch = replay(factory(space, 5), history).batch(4)
    keys = [p.key() for p in batch]
    assert len(batch) >= 2 and keys[0] == asked.key()
    assert len(set(keys)) == len(keys)
    assert not set(keys) & ({p.key() for p, _ in history} | {space.incumbent.fingerprint()})
    again = replay(factory(space, 5), history).batch(4)
    assert [p.key() for p in again] == keys, "a function of the space, the seed and the history"


def _foreign(config: EngineConfig) -> Proposal:
    return Proposal(
        config=config,
        changes={},
        proposer="manual",
        reason="set by hand",
        prediction=Prediction(capacity_ratio=1.0, reason="no idea"),
    )


def test_long_shots_never_undo_a_promoted_move() -> None:
    """Moves back to a value a promotion left (512 -> 256 sequences, async back off) are not
    long shots: the run measured them and kept the other side; moves past it still are."""
    baseline = EngineConfig(model="synthetic/model", max_num_seqs=256, async_scheduling=False)
    middle = baseline.replace(async_scheduling=True, kv_cache_dtype="fp8")
    incumbent = middle.replace(max_num_seqs=512)
    kv = synthetic_space.candidate("kv_cache_dtype", "to", 1.0, "fp8")
    space = make_space(incumbent, current_values={**CURRENT, "max_num_seqs": 512},
                       candidates=(*CANDIDATES, kv))  # fmt: skip
    moved = _moves_asked(LongShots(space, earlier=[baseline, middle]))
    assert ("max_num_seqs", 1024) in moved
    assert ("max_num_seqs", 256) not in moved and ("async_scheduling", False) not in moved
    assert ("kv_cache_dtype", "auto") not in moved, "unset was the default, the first choice"
    assert ("max_num_seqs", 256) in _moves_asked(LongShots(space)), "the walk rules it out"


@pytest.mark.parametrize("lean", ["down", "to"])
def test_a_long_shot_that_measured_no_loss_steps_on_the_same_way(lean: str) -> None:
    """document-qa (2026-12-01): the chunk budget's 4,096 -> 2,048 measured -1.2% and the
    long shots stopped there, while 1,024 and 512 measure +6.0% and +7.6%. A flat step steps
    on once every knob's one-step moves are asked (so that a run ending before then walks
    the path it walked; in a run, after their combination too), where its rule leans that
    way or the step the other way lost (8,192: -8.7%); a loss does not, nor a knob flat both
    ways."""
    chunk = synthetic_space.candidate("max_num_batched_tokens", lean, 1.0)
    seqs = synthetic_space.candidate("max_num_seqs", "up", 1.0)
    incumbent = EngineConfig(model="synthetic/model", max_num_batched_tokens=4096)
    current = {**CURRENT, "max_num_batched_tokens": 4096}
    space = make_space(incumbent, incumbent_objective=15.33, current_values=current,
                       candidates=(chunk, seqs))  # fmt: skip
    by_chunk = {16384: 14.0, 8192: 14.0, 4096: 15.33, 2048: 15.14, 1024: 16.25, 512: 16.49}

    def measured(config: EngineConfig) -> Outcome:
        tokens = config.max_num_batched_tokens or 4096
        value = by_chunk[tokens] * (0.9 if config.max_num_seqs else 1.0)
        return Outcome(status="ok", objective=value, feasible=True)

    asked = [
        (p.params["knob"], p.params["to"])
        for p, _ in drive(_long_shots_then_step_ons(space, 0), 20, measured)
    ]
    chunks = [2048, 8192] if lean == "down" else [8192, 2048]  # up first without a lean
    first = [("max_num_batched_tokens", chunks[0]), ("max_num_seqs", 512),
             ("max_num_batched_tokens", chunks[1]), ("max_num_seqs", 128)]  # fmt: skip
    stepping = [("max_num_batched_tokens", t) for t in (1024, 512)]
    assert asked == [*first, *stepping], asked
    assert ("max_num_batched_tokens", 256) not in asked, "512 is the range's end"
    by_chunk[8192] = 15.33  # flat both ways: a budget the steps never fill
    asked = [
        (p.params["knob"], p.params["to"])
        for p, _ in drive(_long_shots_then_step_ons(space, 0), 20, measured)
    ]
    assert (("max_num_batched_tokens", 1024) in asked) == (lean == "down"), asked
    assert ("max_num_batched_tokens", 16384) not in asked, asked
    by_chunk[2048] = 14.0  # -8.7%: a loss, which stays where it is (and 8,192 steps on)
    asked = [
        (p.params["knob"], p.params["to"])
        for p, _ in drive(_long_shots_then_step_ons(space, 0), 20, measured)
    ]
    assert ("max_num_batched_tokens", 1024) not in asked, asked
    assert ("max_num_batched_tokens", 16384) in asked, asked


def test_a_long_shot_follows_each_of_the_samplers_draws() -> None:
    """frontend-bound (2026-12-01): under ``auto`` the walk hands over to TPE, which never
    runs out, and six TPE draws used up the patience with no long shot asked. Once the
    sampler draws, each of its draws is followed by one long shot while any is left, one a
    round at most (so a round of workers keeps the sampler's draws)."""
    proposer = _auto_then_long_shots(make_space(), 0)
    kinds = [p.proposer for p, _ in drive(proposer, 30)]
    sampled = [i for i, kind in enumerate(kinds) if kind.startswith("optuna-")]
    shots = [i for i, kind in enumerate(kinds) if kind == LongShots.name]
    assert sampled and shots, kinds
    assert min(shots) > min(sampled), "no long shot before the walk is done"
    for i in sampled[: len(shots)]:
        assert kinds[i + 1] == LongShots.name, kinds
    replayed = replay(
        _auto_then_long_shots(make_space(), 0), drive(_auto_then_long_shots(make_space(), 0), 12)
    )
    round_ = replayed.batch(3)
    assert sum(p.proposer == LongShots.name for p in round_) <= 1, round_


def test_a_configuration_measured_earlier_is_answered_not_asked() -> None:
    """The walk's way back to an earlier incumbent (the cap rule pricing 128 -> 256 sequences
    at 1.63x right after 256 -> 128 was promoted, agentic 2026-11-29) is told what that
    incumbent measured, and the walk turns: the same asks as a walk told it by a trial."""
    space = make_space()
    up = space.incumbent.replace(max_num_seqs=512)
    known = {up.fingerprint(): Outcome(status="ok", objective=1.0, feasible=True)}
    asked = [p.config for p, _ in drive(Known(CoordinateDescent(space), known), 40)]
    assert up not in asked
    walk = CoordinateDescent(space)
    first = walk.ask()
    assert first is not None and first.config == up, "unwrapped, the walk asks it first"
    walk.tell(first, known[up.fingerprint()])
    assert asked == [p.config for p, _ in drive(walk, 40)]


def _moves_asked(proposer: Proposer) -> list[tuple[object, object]]:
    return [(p.params["knob"], p.params["to"]) for p, _ in drive(proposer, 20)]


def test_the_moves_measured_alone_are_tried_together_once() -> None:
    """Two flat moves and a loss, each alone: the two that were no loss, together, once, at
    the product of their ratios (the quickstart: 512 sequences and 1,024-token chunks each
    inside the noise, together +18.5%)."""
    flat = (synthetic_space.candidate("max_num_seqs", "up", 1.07),
            synthetic_space.candidate("max_num_batched_tokens", "up", 1.06),
            synthetic_space.candidate("gpu_memory_utilization", "up", 1.05))  # fmt: skip
    night = TrialPrice(floor_rel=0.03, spread_log=0.115, cost_share=0.05)
    space = make_space(incumbent_objective=10.0, candidates=flat, price=night)
    ratios = {"max_num_seqs": 0.99, "max_num_batched_tokens": 1.02, "gpu_memory_utilization": 0.9}

    def alone(config: EngineConfig) -> Outcome:
        (name,) = config.changes_from(space.incumbent)
        return Outcome(status="ok", objective=10.0 * ratios[name], feasible=True)

    walked = drive(CoordinateDescent(space, min_gain=0.03), 9, alone)
    combination = replay(Combination(space, min_gain=0.03), walked)
    asked = combination.ask()
    assert asked is not None and asked.proposer == "combination"
    assert set(asked.changes) == {"max_num_seqs", "max_num_batched_tokens"}
    assert asked.prediction.capacity_ratio == pytest.approx(0.99 * 1.02)
    combination.tell(asked, Outcome(status="ok", objective=11.8, feasible=True))
    assert combination.ask() is None, "once"
    alone_only = Combination(space.model_copy(update={"candidates": flat[:1]}), min_gain=0.03)
    assert alone_only.ask() is None, "one knob is no combination"
    priced_out = Combination(space.model_copy(update={"price": None}), min_gain=0.03)
    replay(priced_out, [(p, alone(p.config)) for p, _ in walked])
    assert priced_out.ask() is None, "without a price it must be predicted beyond the floor"


def test_the_combination_does_not_undo_the_promotion_that_made_the_incumbent() -> None:
    """The quickstart's combination held "quantization -> default (0.97x)": the incumbent
    before fp8 was promoted is one knob from it and measured within the minimum effect, but a
    validation had judged it the loser (2026-12-03)."""
    flat = (synthetic_space.candidate("max_num_seqs", "up", 1.07),
            synthetic_space.candidate("max_num_batched_tokens", "up", 1.06),
            synthetic_space.candidate("gpu_memory_utilization", "up", 1.05))  # fmt: skip
    night = TrialPrice(floor_rel=0.03, spread_log=0.115, cost_share=0.05)
    space = make_space(incumbent_objective=10.0, candidates=flat, price=night)
    before = space.incumbent.replace(max_num_batched_tokens=1024)  # the incumbent it replaced
    guess = Prediction(capacity_ratio=1.1, reason="")
    earlier = Proposal(config=before, changes={"max_num_seqs": 64}, proposer="coordinate",
                       reason="an earlier move", prediction=guess)  # fmt: skip
    seqs = space.incumbent.replace(max_num_seqs=512)
    now = Proposal(config=seqs, changes={"max_num_seqs": 512}, proposer="coordinate",
                   reason="a move from here", prediction=guess)  # fmt: skip
    combination = Combination(space, min_gain=0.03)
    combination.tell(earlier, Outcome(status="ok", objective=9.8, feasible=True))
    combination.tell(now, Outcome(status="ok", objective=10.1, feasible=True))
    assert combination.ask() is None, "one move from here is no combination"


def test_a_move_is_no_loss_down_to_min_gain_below_the_incumbent_and_never_when_it_failed() -> None:
    """The step-ons and the combination step share this rule: 9.8 of 10 at a 2% minimum
    effect is no loss, 9.7 is a loss, and a failure or a missing reference never is."""
    ok = Outcome(status="ok", objective=9.8, feasible=True)
    assert no_loss_ratio(ok, 10.0, 0.02) == pytest.approx(0.98)
    assert no_loss_ratio(Outcome(status="ok", objective=9.7, feasible=True), 10.0, 0.02) is None
    assert no_loss_ratio(ok, None, 0.02) is None
    assert no_loss_ratio(Outcome(status="crashed", detail="server died"), 10.0, 0.02) is None
