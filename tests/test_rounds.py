"""Rounds of proposals for several workers (``kneepoint.policies.rounds``): one single-knob
step per knob, each knob walking as the sequential walk would on it, and a sampler asked
several times with a stand-in outcome between asks."""

from __future__ import annotations

from kneepoint.policies.coordinate import CoordinateDescent
from kneepoint.policies.optuna_search import OptunaProposer
from kneepoint.policies.proposer import Proposer, replay
from kneepoint.policies.rounds import coordinate_round, liar_round
from kneepoint.records.proposal import Outcome, Proposal

from .synthetic_space import CANDIDATES, capacity, make_space


def test_a_round_takes_the_first_step_of_as_many_knobs_in_the_pruning_order() -> None:
    space = make_space()
    proposals = coordinate_round(space, [], 3, seed=0, min_gain=0.02)
    assert [list(p.changes) for p in proposals] == [
        ["max_num_seqs"], ["max_num_batched_tokens"], ["gpu_memory_utilization"],
    ]  # fmt: skip
    assert [p.changes["max_num_seqs"] for p in proposals[:1]] == [512]
    everything = coordinate_round(space, [], 10, seed=0, min_gain=0.02)
    assert len(everything) == len(CANDIDATES)
    assert len({p.key() for p in everything}) == len(everything)


def test_each_knob_walks_on_as_its_sequential_walk_would() -> None:
    space = make_space()
    history: list[tuple[Proposal, Outcome]] = []
    for _ in range(4):  # four rounds of three workers against a fixed incumbent
        for proposal in coordinate_round(space, history, 3, seed=0, min_gain=0.02):
            history.append((proposal, capacity(proposal.config)))
    seqs = [p.changes.get("max_num_seqs") for p, _ in history if "max_num_seqs" in p.changes]
    alone = space.model_copy(update={"candidates": CANDIDATES[:1]})
    walk: Proposer = CoordinateDescent(alone, 0, min_gain=0.02)
    sequential = []
    while (proposal := walk.ask()) is not None and len(sequential) < len(seqs):
        sequential.append(proposal.changes["max_num_seqs"])
        walk.tell(proposal, capacity(proposal.config))
    assert seqs == sequential
    assert len({p.key() for p, _ in history}) == len(history), "nothing is proposed twice"


def test_a_round_is_empty_when_every_walk_is_over() -> None:
    space = make_space(candidates=CANDIDATES[3:4])  # async scheduling: one try
    first = coordinate_round(space, [], 4, seed=0, min_gain=0.02)
    assert len(first) == 1
    told = [(first[0], capacity(first[0].config))]
    assert coordinate_round(space, told, 4, seed=0, min_gain=0.02) == []


def test_a_sampler_asked_for_a_round_gives_distinct_configurations() -> None:
    space = make_space()

    def build() -> Proposer:
        return OptunaProposer(space, 7, n_startup_trials=2)

    proposals = liar_round(build, space, [], 4)
    assert len(proposals) == 4
    assert len({p.key() for p in proposals}) == 4
    assert space.incumbent.fingerprint() not in {p.key() for p in proposals}
    again = liar_round(build, space, [], 4)
    assert [p.key() for p in again] == [p.key() for p in proposals], "a pure function"
    told = [(p, capacity(p.config)) for p in proposals]
    later = liar_round(build, space, told, 4)
    assert not {p.key() for p in later} & {p.key() for p in proposals}
    assert replay(build(), told).ask() is not None
