"""Coordinate descent first, then a model-based search: the loop's default proposer.

Single-knob steps along the pruned candidates, in the order the diagnosis expects them to pay,
are the cheapest way to the knobs that matter; when the walk has nothing left, a sampler over
the same pruned space (warm-started from every trial so far) looks for what one knob at a time
cannot see. Like every proposer, its state is its space, its seed and the history told.
"""

from __future__ import annotations

from collections.abc import Callable

from kneepoint.policies.proposer import Proposer, replay
from kneepoint.records.proposal import Outcome, Proposal


class Phased:
    """Asks ``first`` until it is done, then ``then()`` (built on demand, with the history)."""

    def __init__(self, first: Proposer, then: Callable[[], Proposer] | None) -> None:
        self.first, self._make_then = first, then
        self.then: Proposer | None = None
        self._history: list[tuple[Proposal, Outcome]] = []
        self.name = first.name

    def ask(self) -> Proposal | None:
        if self.then is None:
            proposal = self.first.ask()
            if proposal is not None or self._make_then is None:
                return proposal
            self.then = replay(self._make_then(), self._history)
            self.name = self.then.name
        return self.then.ask()

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self._history.append((proposal, outcome))
        self.first.tell(proposal, outcome)
        if self.then is not None:
            self.then.tell(proposal, outcome)
