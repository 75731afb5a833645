"""Coordinate descent first, then a model-based search: the loop's default proposer.

Single-knob steps along the pruned candidates, in the order the diagnosis expects them to pay,
are the cheapest way to the knobs that matter; when the walk has nothing left, a sampler over
the same pruned space (warm-started from every trial so far) looks for what one knob at a time
cannot see. Like every proposer, its state is its space, its seed and the history told.
"""

from __future__ import annotations

from collections.abc import Callable

from kneepoint.policies.search.proposer import Proposer, replay
from kneepoint.records import Outcome, Proposal


class Phased:
    """Asks ``first`` until it is done, then ``then()`` (built on demand, with the history)."""

    def __init__(self, first: Proposer, then: Callable[[], Proposer] | None) -> None:
        self.first, self._make_then = first, then
        self.then: Proposer | None = None
        self._history: list[tuple[Proposal, Outcome]] = []
        self.name = first.name

    def ask(self) -> Proposal | None:
        batch = self.batch(1)
        return batch[0] if batch else None

    def batch(self, n: int) -> list[Proposal]:
        if self.then is None:
            proposals = self.first.batch(n)
            if proposals or self._make_then is None:
                return self._named(proposals)
            self._switch()
        assert self.then is not None
        return self._named(self.then.batch(n))

    def _named(self, proposals: list[Proposal]) -> list[Proposal]:
        """The proposals, the name now the one who asked them (a ``then`` that asks nothing
        leaves the name of whoever asked last)."""
        if proposals:
            self.name = proposals[0].proposer
        return proposals

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        # The switch happens where the history first leaves ``first`` with nothing to ask,
        # whether or not it was asked there: a fresh instance told this history then switches
        # where the live one did (told on, the walk could find a later sampler's trial on its
        # path and walk again, and a resumed run would ask what the live one never did).
        if self.then is None and self._make_then is not None and self.first.ask() is None:
            self._switch()
        self._history.append((proposal, outcome))
        (self.first if self.then is None else self.then).tell(proposal, outcome)

    def _switch(self) -> None:
        assert self._make_then is not None
        self.then = replay(self._make_then(), self._history)
