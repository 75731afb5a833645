"""n-gram speculative decoding in the simulated engine: which decodes find a draft, and how
many of its tokens the target accepts.

A real n-gram drafter looks the last tokens of a sequence up in its context; the simulator's
token ids carry no content, so each traffic class says how its drafts fare
(``kneepoint.records.drafts.DraftAcceptance``): a decode finds a draft with the class's
``drafted_share``, and its first i tokens are accepted with the class's share at position i
(one draw per draft, the shares falling, so the accepted tokens are always a leading run).
Deterministic: one seeded generator, drawn in step order.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from kneepoint.physics import shares_through
from kneepoint.records import DraftAcceptance, Workload
from kneepoint.sim.request import SimRequest


def acceptance_of(workload: Workload) -> dict[str, DraftAcceptance]:
    """How n-gram drafts fare, per traffic class that says (the engine's ``acceptance``)."""
    return {c.name: c.speculation for c in workload.classes if c.speculation is not None}


class Drafter:
    """Draft tokens for each decode of a speculating engine, ``k`` at most."""

    def __init__(self, k: int, acceptance: Mapping[str, DraftAcceptance], seed: int = 0) -> None:
        self.k = k
        self._classes = {
            name: (acc.drafted_share, shares_through(acc.accepted_by_position, k))
            for name, acc in acceptance.items()
        }
        self._rng = random.Random(seed)

    def draft(self, req: SimRequest, budget: int) -> int:
        """Draft tokens to verify with ``req``'s next decode (0: no draft found, or no room:
        vLLM drafts no further than the answer's end and the step's token budget)."""
        found = self._classes.get(req.traffic_class)
        if found is None or found[0] <= 0.0:
            return 0
        room = min(self.k, req.max_tokens - req.num_output - 1, budget - 1)
        if room <= 0 or self._rng.random() >= found[0]:
            return 0
        return room

    def accepted(self, req: SimRequest, k: int) -> int:
        """How many of the ``k`` draft tokens ``req``'s step accepted."""
        shares = self._classes[req.traffic_class][1]
        u = self._rng.random()
        return sum(1 for share in shares[:k] if u < share)
