"""The proposer interface: ask for the next configuration, tell what it gave.

A proposer's state is a function of its search space, its seed and the history told to it, so
a resumed study builds a fresh proposer and replays the ledger's (proposal, outcome) pairs.
``tell`` accepts proposals that another proposer made (the Optuna proposer is warm-started from
the coordinate-descent trials before it). ``ask`` returns None when there is nothing left worth
trying. A failed trial is an outcome like any other.

``batch(n)`` asks for up to ``n`` configurations to measure side by side (a round on as many
GPUs; ``kneepoint tune`` on one GPU is a round of one): its first is what ``ask`` returns, so a
pool of one walks exactly the path ``tune`` walks. A proposer may tell itself stand-in outcomes
to make a batch (the "constant liar" of batch Bayesian optimisation); the caller then rebuilds it
from the true history before it asks again, as the pool's driver does each round.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kneepoint.records import Outcome, Proposal, SearchSpace

SAMPLED = "optuna-"
"""How a sampler's proposer names itself (``optuna-tpe``): one that never runs out of draws."""


class Proposer(Protocol):
    name: str

    def ask(self) -> Proposal | None:
        """The next configuration to try; None: converged, or nothing worth trying."""
        ...

    def batch(self, n: int) -> list[Proposal]:
        """Up to ``n`` distinct configurations to measure at once, ``ask``'s first; empty:
        converged."""
        ...

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        """Record what a proposal (this proposer's or another's) gave."""
        ...


def stand_in(space: SearchSpace) -> Outcome:
    """What a proposal asked for a batch is told while it is measured: the incumbent's
    objective, so the next ask looks elsewhere."""
    return Outcome(
        status="ok",
        objective=space.incumbent_objective or 0.0,
        feasible=True,
        detail="stand-in while it is measured with its round",
    )


def liar_batch(proposer: Proposer, space: SearchSpace, n: int) -> list[Proposal]:
    """``n`` asks of one proposer, each but the last told ``stand_in`` before the next."""
    chosen: list[Proposal] = []
    while len(chosen) < n and (proposal := proposer.ask()) is not None:
        chosen.append(proposal)
        if len(chosen) < n:
            proposer.tell(proposal, stand_in(space))
    return chosen


def replay(proposer: Proposer, history: Iterable[tuple[Proposal, Outcome]]) -> Proposer:
    """Tell a fresh proposer the history, in order; returns it."""
    for proposal, outcome in history:
        proposer.tell(proposal, outcome)
    return proposer
