"""Several proposals at once, for a round of workers on as many GPUs.

Coordinate descent asks one single-knob step at a time, each after the last one's outcome. A
round of ``n`` workers takes the next step of ``n`` knobs at once instead: each candidate knob
walks on its own (a ``CoordinateDescent`` over a space of that knob alone, told the whole
history, so it steps, halves and stops as the sequential walk would on its knob), and the
round is the first ``n`` knobs, in the pruning's order, with a step left. When every knob's
walk is over, a model-based sampler (``auto`` and ``optuna``) is asked ``n`` times, each ask
told a stand-in outcome, the incumbent's objective (the "constant liar" of batch Bayesian
optimisation), so the next ask looks elsewhere. Pure: the proposals are a function of the
space, the seed and the history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kneepoint.policies.coordinate import CoordinateDescent
from kneepoint.policies.proposer import Proposer, replay
from kneepoint.records.proposal import Outcome, Proposal, SearchSpace

History = Iterable[tuple[Proposal, Outcome]]


def coordinate_round(
    space: SearchSpace, history: History, n: int, *, seed: int, min_gain: float
) -> list[Proposal]:
    """The next step of each of the first ``n`` knobs whose walk is not over."""
    told = list(history)
    chosen: list[Proposal] = []
    for candidate in space.candidates:
        if len(chosen) >= n:
            break
        alone = space.model_copy(update={"candidates": (candidate,)})
        walk = replay(CoordinateDescent(alone, seed, min_gain=min_gain), told)
        proposal = walk.ask()
        if proposal is not None and all(proposal.key() != p.key() for p in chosen):
            chosen.append(proposal)
    return chosen


def liar_round(
    build: Callable[[], Proposer], space: SearchSpace, history: History, n: int
) -> list[Proposal]:
    """``n`` asks of one proposer, each told the incumbent's objective before the next."""
    proposer = replay(build(), history)
    stand_in = Outcome(
        status="ok",
        objective=space.incumbent_objective or 0.0,
        feasible=True,
        detail="stand-in while it is measured with its round",
    )
    chosen: list[Proposal] = []
    for _ in range(n):
        proposal = proposer.ask()
        if proposal is None:
            break
        chosen.append(proposal)
        proposer.tell(proposal, stand_in)
    return chosen
