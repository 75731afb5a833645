"""The proposer interface: ask for the next configuration, tell what it gave.

A proposer's state is a function of its search space, its seed and the history told to it, so
a resumed study builds a fresh proposer and replays the ledger's (proposal, outcome) pairs.
``tell`` accepts proposals that another proposer made (the Optuna proposer is warm-started from
the coordinate-descent trials before it). ``ask`` returns None when there is nothing left worth
trying. A failed trial is an outcome like any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kneepoint.records.proposal import Outcome, Proposal


class Proposer(Protocol):
    name: str

    def ask(self) -> Proposal | None:
        """The next configuration to try; None: converged, or nothing worth trying."""
        ...

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        """Record what a proposal (this proposer's or another's) gave."""
        ...


def replay(proposer: Proposer, history: Iterable[tuple[Proposal, Outcome]]) -> Proposer:
    """Tell a fresh proposer the history, in order; returns it."""
    for proposal, outcome in history:
        proposer.tell(proposal, outcome)
    return proposer
