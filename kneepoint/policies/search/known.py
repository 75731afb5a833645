"""Configurations the run already measured are answered from the ledger, not measured again.

A rule prices a move from the incumbent's readings alone, and can send the walk back to a
configuration the run has measured and left (an earlier incumbent, re-priced from the new
one's readings), spending a screen to measure it again. Wrapped in ``Known``, a proposer
asking for such a configuration is told what it measured and asked again, so it walks on
(coordinate descent halves back or turns, as after any loss).
"""

from __future__ import annotations

from kneepoint.policies.search.proposer import Proposer
from kneepoint.records import Outcome, Proposal


class Known:
    """Asks ``inner``; a proposal whose configuration is in ``known`` (by fingerprint) is told
    its known outcome instead of being returned, and ``inner`` is asked again."""

    def __init__(self, inner: Proposer, known: dict[str, Outcome]) -> None:
        self.inner, self.known = inner, known
        self.name = inner.name

    def ask(self) -> Proposal | None:
        batch = self.batch(1)
        return batch[0] if batch else None

    def batch(self, n: int) -> list[Proposal]:
        chosen: list[Proposal] = []
        answered: set[str] = set()
        while len(chosen) < n:
            asked = self.inner.batch(n - len(chosen))
            self.name = self.inner.name
            first_known = next((p for p in asked if p.key() in self.known), None)
            if first_known is None:
                return [*chosen, *asked]
            if first_known.key() in answered:
                break  # told, it asks the same again: nothing else to ask
            answered.add(first_known.key())
            # The ones before it were told stand-ins (``liar_batch``) and stay asked; the
            # ones after were asked beside it and are asked again.
            chosen += asked[: asked.index(first_known)]
            self.inner.tell(first_known, self.known[first_known.key()])
        return chosen

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self.inner.tell(proposal, outcome)
