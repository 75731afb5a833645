"""Step-ons: a numeric one-knob move that measured no loss, a long shot or the walk's step
from the incumbent, one step further the same way, once the long shots and their combination
are spent (``tuning.stop: budget``).

A long shot moves a knob one step from the incumbent (``kneepoint.policies.search.long_shots``);
a flat first step says little about the second: a chunk budget flat one step down can gain
two steps down, where the smaller chunk keeps the long prompts' prefills from stalling the
decodes past the ITL limit (benchmarks/regret.py's document-qa study). A knob steps on only
where it shows a trend that way: its rule leans that way, or its step the other way measured a
loss. And only last: stepping on before the other long shots and before the combination of the
moves measured alone spends trials on repeats of the step before, where those one-step moves
and combinations gain (benchmarks/regret.py's rag and cache-bound studies). The walk's own
knobs step on too: a walk that halved back from a step too small to show leaves the knob's
next step untried (benchmarks/regret.py's scheduling-bound study).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import JsonValue

from kneepoint.policies.search.long_shots import LongShots, one_knob_move
from kneepoint.policies.search.proposer import liar_batch
from kneepoint.policies.search.space import effective, show
from kneepoint.policies.search.worth import no_loss_ratio
from kneepoint.records import EngineConfig, KnobDomain, Outcome, Proposal, SearchSpace

Way = Literal["up", "down"]


class StepOns:
    """Asks, over ``space``'s candidates (the walk's and the long shots), the step past each
    numeric knob's furthest one-step move from the incumbent that measured no loss (no more
    than ``min_gain`` below the incumbent), while the knob shows a trend that way; told the
    history, it learns which."""

    name = LongShots.name

    def __init__(
        self, space: SearchSpace, earlier: Sequence[EngineConfig] = (), *, min_gain: float = 0.02
    ) -> None:
        self.space, self.min_gain = space, min_gain
        shots = LongShots(space, earlier)
        self._first = shots.moves
        self._ours = {p.key() for p in self._first}
        """The keys of every move it knows as its own: the first steps and its step-ons."""
        self._told = {config.fingerprint() for config in shots.walk}
        self._domains = {c.knob.name: c.knob.domain for c in space.candidates}
        self._leans = {c.knob.name: c.direction for c in space.candidates}
        self._no_loss: dict[tuple[str, Way], bool] = {}
        """Per numeric knob and way, whether its furthest long shot that way lost nothing."""
        self._moves: list[Proposal] = []

    def ask(self) -> Proposal | None:
        return next((p for p in self._moves if p.key() not in self._told), None)

    def batch(self, n: int) -> list[Proposal]:
        return liar_batch(self, self.space, n)

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self._told.add(proposal.key())
        # Only its own moves from this incumbent: a replayed history holds earlier spaces'.
        ours = proposal.key() in self._ours
        step = _numeric_step(proposal, self._domains) if ours else None
        if step is None:
            return
        name, way = step
        self._no_loss[name, way] = self._flat(outcome)
        for (knob, towards), flat in list(self._no_loss.items()):
            if flat and self._trend(knob, towards):
                further = self._step_on(knob, towards)
                if further is not None and further.key() not in self._ours:
                    self._ours.add(further.key())
                    self._moves.append(further)

    def _flat(self, outcome: Outcome) -> bool:
        return no_loss_ratio(outcome, self.space.incumbent_objective, self.min_gain) is not None

    def _trend(self, name: str, way: Way) -> bool:
        """Whether a flat step ``way`` points somewhere: the knob's rule leans that way, or
        its step the other way measured a loss. A knob flat both ways is flat here: a chunk
        budget the steps never fill measures the same either way, and stepping on spends
        trials on repeats (benchmarks/regret.py's scheduling-bound study)."""
        opposite: Way = "down" if way == "up" else "up"
        return self._leans.get(name) == way or self._no_loss.get((name, opposite)) is False

    def _step_on(self, name: str, way: Way) -> Proposal | None:
        """The move one step past the furthest flat value measured ``way``, from the
        incumbent; None at the range's end."""
        domain, old = self._domains[name], effective(self.space.incumbent, name, self.space)
        reached = [
            to
            for p in [*self._first, *self._moves]
            if p.key() in self._told
            and _numeric_step(p, self._domains) == (name, way)
            and isinstance(to := p.params["to"], int | float)
        ]
        furthest = max(reached) if way == "up" else min(reached)
        past = [v for v in domain.neighbours(furthest) if _beyond(v, furthest, way)]
        if not past:
            return None
        measured = f"{show(furthest)} measured no loss"
        return one_knob_move(
            self.space, name, old, past[0], f"a long shot stepping on ({measured})"
        )


def _numeric_step(proposal: Proposal, domains: dict[str, KnobDomain]) -> tuple[str, Way] | None:
    """The knob and way of a long shot that moved a numeric knob; None for any other."""
    name, old, to = (proposal.params.get(k) for k in ("knob", "from", "to"))
    domain = domains.get(name) if isinstance(name, str) else None
    if domain is None or not domain.numeric or not isinstance(name, str):
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (old, to)):
        return None
    assert isinstance(old, int | float) and isinstance(to, int | float)
    return name, "up" if to > old else "down"


def _beyond(value: JsonValue, than: float, way: Way) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return value > than if way == "up" else value < than
