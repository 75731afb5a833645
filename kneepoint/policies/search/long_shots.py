"""Long shots: one-knob moves of the knobs the pruning's own rules ruled out, tried in turn
once no candidate is left, or every candidate has been tried, and the budget is not spent
(``tuning.stop: budget``).

Each knob is moved one step from the incumbent each way (a doubling and a halving on a log
scale, a quarter of the range on a linear one, the other value of a switch, every other
choice), round by round across the knobs, each at a predicted 1.0x: nothing vouches for the
gain. A numeric knob goes first the way its rule leans (the long shot's ``direction``), up
otherwise. One knob at a time, because a joint draw over every ruled-out knob undoes the moves
already promoted, where the optimum can lie a single-knob move or two from the incumbent
(benchmarks/regret.py's rag study).

A flat first step on a numeric knob can step on once the rest is spent
(``kneepoint.policies.search.step_ons``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

from pydantic import JsonValue

from kneepoint.policies.search.proposer import SAMPLED, Proposer, liar_batch
from kneepoint.policies.search.space import build_config, changes_from_incumbent, effective, show
from kneepoint.records import (
    EngineConfig,
    KnobDomain,
    Outcome,
    Prediction,
    Proposal,
    SearchSpace,
    same,
)


class LongShots:
    """Asks the one-knob moves of ``space``'s candidates (the long shots) not yet measured.

    ``earlier`` are the run's incumbents before ``space``'s, in order (its baseline first): a
    move that sets a knob back to the value a promotion moved it from is not asked, because the
    run measured that move and kept the other side of it."""

    name = "long-shot"

    def __init__(self, space: SearchSpace, earlier: Sequence[EngineConfig] = ()) -> None:
        self.space = space
        self.walk = [*earlier, space.incumbent]
        self._told = {config.fingerprint() for config in self.walk}
        left = _left_behind(self.walk, {c.knob.name: c.knob.domain for c in space.candidates})
        self.moves = [p for p in _moves(space) if not _reverts(p, left)]
        """Every one-knob move it asks, in order."""

    def ask(self) -> Proposal | None:
        return next((p for p in self.moves if p.key() not in self._told), None)

    def batch(self, n: int) -> list[Proposal]:
        return liar_batch(self, self.space, n)

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self._told.add(proposal.key())


class ThenLongShots:
    """Asks ``first`` (the study's proposer over the candidates) while it has anything to
    ask, then the long shots, so a run whose candidate space is spent with budget left goes
    on rather than ending "exhausted".

    A sampler never runs out, so once ``first`` draws from one (an Optuna proposer, after the
    walk), each of its draws is followed by one long shot while any is left: its draws alone
    can spend the patience before any long shot is asked."""

    def __init__(self, first: Proposer, long_shots: LongShots) -> None:
        self.first, self.long_shots = first, long_shots
        self.name = first.name
        self._first_spent = False
        """``first`` asked nothing; it stays so until told an outcome of its own."""
        self._owed = False
        """A sampler's draw was told since the last long shot."""

    def ask(self) -> Proposal | None:
        batch = self.batch(1)
        return batch[0] if batch else None

    def batch(self, n: int) -> list[Proposal]:
        # One long shot a round at most, so a pool's rounds keep the sampler's draws.
        owed = self.long_shots.batch(1) if self._owed and not self._first_spent else []
        proposals = [] if self._first_spent or n <= len(owed) else self.first.batch(n - len(owed))
        self._first_spent = not proposals and not owed
        if self._first_spent:
            # Only then: long shots filling a short round's slots would spend the budget
            # before the sampler's draws (benchmarks/regret.py's quickstart on 3 GPUs).
            proposals = self.long_shots.batch(n)
        proposals = [*owed, *proposals]
        if proposals:
            self.name = proposals[0].proposer
        return proposals

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        # The long shots lie outside the first proposer's space: it is told its own kind.
        self.long_shots.tell(proposal, outcome)
        if proposal.proposer == LongShots.name:
            self.name = LongShots.name
            self._owed = False
        else:
            self.first.tell(proposal, outcome)
            self._first_spent = False
            self._owed = proposal.proposer.startswith(SAMPLED)


def _left_behind(
    walk: Sequence[EngineConfig], domains: dict[str, KnobDomain]
) -> dict[str, list[JsonValue]]:
    """Per knob, the values successive incumbents moved it away from. An unset choice knob
    whose choices do not hold None was at the engine's default, the catalogue's first choice
    (configs/knobs.yaml: kv_cache_dtype's auto)."""
    left: dict[str, list[JsonValue]] = {}
    for before, after in pairwise(walk):
        for name, (old, _new) in after.changes_from(before).items():
            left.setdefault(name, []).append(_default_of(domains.get(name)) if old is None else old)
    return left


def _default_of(domain: KnobDomain | None) -> JsonValue:
    choices = domain.choices_or_empty if domain is not None else ()
    return choices[0] if choices and None not in choices else None


def _reverts(proposal: Proposal, left: dict[str, list[JsonValue]]) -> bool:
    """Whether the long shot sets its knob back to a value a promotion moved it from."""
    name, to = proposal.params["knob"], proposal.params["to"]
    return isinstance(name, str) and any(same(to, old) for old in left.get(name, []))


def _moves(space: SearchSpace) -> Iterator[Proposal]:
    """Every knob's first neighbour, then every knob's second, and so on."""
    per_knob = []
    for candidate in space.candidates:
        name = candidate.knob.name
        old = effective(space.incumbent, name, space)
        moves = [(name, old, new) for new in candidate.knob.domain.neighbours(old)]
        if candidate.direction == "down":
            moves.reverse()  # its rule leans down (``prune._lean``): that way first
        per_knob.append(moves)
    for turn in range(max((len(moves) for moves in per_knob), default=0)):
        for name, old, new in (moves[turn] for moves in per_knob if turn < len(moves)):
            move = one_knob_move(space, name, old, new, "a long shot, its rule ruled it out")
            if move is not None:
                yield move


def one_knob_move(
    space: SearchSpace, name: str, old: JsonValue, new: JsonValue, why: str
) -> Proposal | None:
    """The incumbent with one knob moved, at 1.0x; None where EngineConfig refuses the value
    beside the rest (never proposed)."""
    config = build_config(space.incumbent, {name: new}, space)
    if config is None:
        return None
    moved = f"{name} {show(old)} -> {show(new)}: {why}"
    return Proposal(
        config=config,
        changes=changes_from_incumbent(config, space),
        proposer=LongShots.name,
        reason=moved,
        prediction=Prediction(capacity_ratio=1.0, reason=moved),
        params={"knob": name, "from": old, "to": new},
    )
