"""The combination step: once the walk has moved each candidate knob alone from the incumbent,
one trial of every move that was not a loss, together.

Moves that each measure inside the noise can gain together where one relieves what stops the
other: on benchmarks/regret.py's quickstart grid, after fp8 weights, 512 sequences,
1,024-token chunks and fp8 KV each measure within 2% alone and +18.5% together, the grid's
optimum (the smaller chunk keeps the bigger batch's steps inside the ITL limit). Without this
step only an Optuna draw that happens to land there finds such a combination.

A part is a configuration told (whoever proposed it) that differs from the incumbent in one
candidate knob, by the move its proposal made, and measured no worse than ``min_gain`` below
it; per knob the best one. An earlier incumbent is one knob from the one that replaced it but
is no part: going back to it undoes a promotion its validation judged a gain. The
combination is predicted at the product of its parts' measured ratios and is asked once, when
at least two knobs have a part and it is worth a trial (``space.price``, as the walk's steps).
"""

from __future__ import annotations

import math

from pydantic import JsonValue

from kneepoint.policies.search.proposer import liar_batch
from kneepoint.policies.search.space import build_config, changes_from_incumbent, show
from kneepoint.policies.search.worth import no_loss_ratio, worth_a_trial
from kneepoint.records import Outcome, Prediction, Proposal, SearchSpace


class Combination:
    """Asks the combination of the parts told so far (see the module docstring), once."""

    name = "combination"

    def __init__(self, space: SearchSpace, seed: int = 0, *, min_gain: float = 0.02) -> None:
        self.space, self.seed, self.min_gain = space, seed, min_gain
        self._told: dict[str, tuple[Proposal, Outcome]] = {}

    def ask(self) -> Proposal | None:
        parts = self._parts()
        if len(parts) < 2:
            return None
        values = {name: value for name, (value, _) in parts.items()}
        config = build_config(self.space.incumbent, values, self.space)
        if config is None or config.fingerprint() in self._told:
            return None
        ratio = math.prod(r for _, r in parts.values())
        if not worth_a_trial(self.space.price, ratio, self.min_gain):
            return None
        each = ", ".join(f"{n} -> {show(v)} ({r:.2f}x)" for n, (v, r) in parts.items())
        reason = f"the moves measured alone, together: {each}"
        return Proposal(
            config=config,
            changes=changes_from_incumbent(config, self.space),
            proposer=self.name,
            reason=reason,
            prediction=Prediction(capacity_ratio=ratio, reason=reason),
            params={"knobs": sorted(parts)},
        )

    def batch(self, n: int) -> list[Proposal]:
        return liar_batch(self, self.space, min(n, 1))

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self._told.setdefault(proposal.key(), (proposal, outcome))

    def _parts(self) -> dict[str, tuple[JsonValue, float]]:
        """Per candidate knob, its best single move from the incumbent that was no loss."""
        reference = self.space.incumbent_objective
        if not reference:
            return {}
        knobs = set(self.space.knob_names())
        best: dict[str, tuple[JsonValue, float]] = {}
        for proposal, outcome in self._told.values():
            changed = proposal.config.changes_from(self.space.incumbent)
            ratio = no_loss_ratio(outcome, reference, self.min_gain)
            if len(changed) != 1 or ratio is None:
                continue
            if proposal.changes != changes_from_incumbent(proposal.config, self.space):
                continue  # not a move from here: an earlier incumbent, say
            ((name, (_, value)),) = changed.items()
            if name in knobs and (name not in best or ratio > best[name][1]):
                best[name] = (value, ratio)
        return dict(sorted(best.items()))
