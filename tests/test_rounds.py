"""Rounds for several workers (``Proposer.batch``): coordinate descent takes the walk's next
step, then the other knobs' next steps by expected gain, each walking as the sequential walk
would on it, and its round of one is the
sequential walk itself; a sampler is asked several times with a stand-in outcome between asks."""

from __future__ import annotations

from kneepoint.policies.search.coordinate import CoordinateDescent
from kneepoint.policies.search.optuna_search import OptunaProposer
from kneepoint.policies.search.proposer import Proposer, replay
from kneepoint.records.proposal import Outcome, Proposal, SearchSpace
from tests.support.synthetic_space import CANDIDATES, capacity, make_space

History = list[tuple[Proposal, Outcome]]


def _round(space: SearchSpace, history: History, n: int) -> list[Proposal]:
    return replay(CoordinateDescent(space, 0, min_gain=0.02), history).batch(n)


def test_a_round_takes_the_walks_step_then_the_other_knobs_best_expected_first() -> None:
    space = make_space()
    proposals = _round(space, [], 3)
    assert [list(p.changes) for p in proposals] == [
        ["max_num_seqs"],  # the walk's own step (1.2x)
        ["max_num_batched_tokens"],  # 1.1x, first of the two in the pruning's order
        ["async_scheduling"],  # 1.1x, ahead of gpu_memory_utilization's 1.05x
    ]
    assert [p.changes["max_num_seqs"] for p in proposals[:1]] == [512]
    everything = _round(space, [], 10)
    assert len(everything) == len(CANDIDATES)
    assert len({p.key() for p in everything}) == len(everything)


def test_each_knob_walks_on_as_its_sequential_walk_would() -> None:
    """Its steps are its sequential walk's; a spare GPU's walk goes on past where the
    sequential walk stops for want of a predicted gain beyond the floor, while one is
    predicted at all."""
    space = make_space()
    history: History = []
    for _ in range(4):  # four rounds of three workers against a fixed incumbent
        for proposal in _round(space, history, 3):
            history.append((proposal, capacity(proposal.config)))
    mine = [p for p, _ in history if p.params["knob"] == "max_num_seqs"]
    seqs = [p.params["to"] for p in mine]
    alone = space.model_copy(update={"candidates": CANDIDATES[:1]})
    walk: Proposer = CoordinateDescent(alone, 0, min_gain=0.02)
    sequential = []
    while (proposal := walk.ask()) is not None and len(sequential) < len(seqs):
        sequential.append(proposal.changes["max_num_seqs"])
        walk.tell(proposal, capacity(proposal.config))
    assert sequential and seqs[: len(sequential)] == sequential
    beyond = mine[len(sequential) :]
    assert all(p.prediction and 1.0 < p.prediction.capacity_ratio <= 1.02 for p in beyond)
    assert len({p.key() for p, _ in history}) == len(history), "nothing is proposed twice"


def test_a_round_of_one_is_the_sequential_walk() -> None:
    space, history = make_space(), []
    walk = CoordinateDescent(space, 0, min_gain=0.02)
    while (proposal := walk.ask()) is not None:
        assert [p.key() for p in _round(space, history, 1)] == [proposal.key()]
        history.append((proposal, capacity(proposal.config)))
        walk.tell(proposal, capacity(proposal.config))
    assert len(history) >= 5 and _round(space, history, 1) == []


def test_a_round_is_empty_when_every_walk_is_over() -> None:
    space = make_space(candidates=CANDIDATES[3:4])  # async scheduling: one try
    first = _round(space, [], 4)
    assert len(first) == 1
    told = [(first[0], capacity(first[0].config))]
    assert _round(space, told, 4) == []


def test_a_sampler_asked_for_a_round_gives_distinct_configurations() -> None:
    space = make_space()

    def batch(history: History) -> list[Proposal]:
        return replay(OptunaProposer(space, 7, n_startup_trials=2), history).batch(4)

    proposals = batch([])
    assert len(proposals) == 4
    assert len({p.key() for p in proposals}) == 4
    assert space.incumbent.fingerprint() not in {p.key() for p in proposals}
    assert [p.key() for p in batch([])] == [p.key() for p in proposals], "a pure function"
    told = [(p, capacity(p.config)) for p in proposals]
    later = batch(told)
    assert not {p.key() for p in later} & {p.key() for p in proposals}
