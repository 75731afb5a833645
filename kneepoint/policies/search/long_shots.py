"""Long shots: one-knob moves of the knobs the pruning's own rules ruled out, tried in turn
once no candidate is left, or every candidate has been tried, and the budget is not spent
(``tuning.stop: budget``).

Each knob is moved one step from the incumbent each way (a doubling and a halving on a log
scale, a quarter of the range on a linear one, the other value of a switch, every other
choice), round by round across the knobs, each at a predicted 1.0x: nothing vouches for the
gain. A numeric knob goes first the way its rule leans (the long shot's ``direction``), up
otherwise. One knob at a time, because a joint draw over every ruled-out knob undoes the moves
already promoted: on rag, eight TPE draws that each turned some of fp8 weights, fp8 KV and
prefix caching back off all failed their screens (2026-11-28), where the grid's optimum lay
two single-knob moves from the incumbent (1,024 sequences, 1,024-token chunks).

A numeric long shot that measured no loss (no more than ``min_gain`` below the incumbent)
steps on the same way, one step further from the incumbent, once every knob's one-step moves
have been asked: a flat first step says little about the second. On document-qa the chunk
budget's 4,096 -> 2,048 measured -1.2% and the long shots stopped there, while 1,024 and 512
measure +6.0% and +7.6% (benchmarks/regret.py, 2026-12-01: the smaller chunk keeps the long
prompts' prefills from stalling the decodes past the ITL limit). Stepping on first cost rag
its optimum: three of its twelve trials went to 8,192 and 16,384 chunks and 0.96
utilisation, each measuring what the step before it had (a budget the steps never fill), and
the run stopped at 44.23 req/s on its patience, where the one-step moves after them reach
51.18.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

from pydantic import JsonValue

from kneepoint.policies.search.proposer import Proposer, liar_batch
from kneepoint.policies.search.space import build_config, changes_from_incumbent, effective, show
from kneepoint.records.engine import EngineConfig
from kneepoint.records.knob_domains import same
from kneepoint.records.knobs import KnobDomain
from kneepoint.records.proposal import Outcome, Prediction, Proposal, SearchSpace


class LongShots:
    """Asks the one-knob moves of ``space``'s candidates (the long shots) not yet measured.

    ``earlier`` are the run's incumbents before ``space``'s, in order (its baseline first): a
    move that sets a knob back to the value a promotion moved it from is not asked, because the
    run measured that move and kept the other side of it (on multi-turn chat, KV fp8 -> auto
    and 512 -> 256 sequences were long shots after both were promoted, 2026-11-28)."""

    name = "long-shot"

    def __init__(
        self, space: SearchSpace, earlier: Sequence[EngineConfig] = (), *, min_gain: float = 0.02
    ) -> None:
        self.space, self.min_gain = space, min_gain
        walk = [*earlier, space.incumbent]
        self._told = {config.fingerprint() for config in walk}
        self._domains = {c.knob.name: c.knob.domain for c in space.candidates}
        left = _left_behind(walk, self._domains)
        self._moves = [p for p in _moves(space) if not _reverts(p, left)]

    def ask(self) -> Proposal | None:
        return next((p for p in self._moves if p.key() not in self._told), None)

    def batch(self, n: int) -> list[Proposal]:
        return liar_batch(self, self.space, n)

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        self._told.add(proposal.key())
        if proposal.proposer == self.name and self._no_loss(outcome):
            further = self._step_on(proposal)
            if further is not None:
                self._moves.append(further)

    def _no_loss(self, outcome: Outcome) -> bool:
        reference = self.space.incumbent_objective
        if outcome.status != "ok" or outcome.objective is None or not reference:
            return False
        return outcome.objective >= (1.0 - self.min_gain) * reference

    def _step_on(self, proposal: Proposal) -> Proposal | None:
        """The move one step past a numeric long shot's value, the same way from the
        incumbent; None at the range's end or for a knob without an order."""
        name, old, to = (proposal.params.get(k) for k in ("knob", "from", "to"))
        domain = self._domains.get(name) if isinstance(name, str) else None
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (old, to))
        if domain is None or not domain.numeric or not numbers:
            return None
        assert (
            isinstance(name, str) and isinstance(old, int | float) and isinstance(to, int | float)
        )
        way = to - old
        past = [
            v for v in domain.neighbours(to) if isinstance(v, int | float) and (v - to) * way > 0
        ]
        if not past:
            return None
        measured = f"{show(to)} measured no loss"
        return _move(self.space, name, old, past[0], f"a long shot stepping on ({measured})")


class ThenLongShots:
    """Asks ``first`` (the study's proposer over the candidates) while it has anything to
    ask, then the long shots. Without it a run whose small candidate space was spent ended
    "exhausted" with budget left: the multi-turn chat quickstart after fp8 KV and 512
    sequences, its one candidate left (fp8 weights) tried, stopped at 3 trials with 4.7 of 8
    device-hours unspent and 9.6% below its grid's optimum (benchmarks/regret.py,
    2026-11-28)."""

    def __init__(self, first: Proposer, long_shots: LongShots) -> None:
        self.first, self.long_shots = first, long_shots
        self.name = first.name
        self._first_spent = False
        """``first`` asked nothing; it stays so until told an outcome of its own."""

    def ask(self) -> Proposal | None:
        batch = self.batch(1)
        return batch[0] if batch else None

    def batch(self, n: int) -> list[Proposal]:
        proposals = [] if self._first_spent else self.first.batch(n)
        self._first_spent = not proposals
        if self._first_spent:
            # Only then: filling a short round's slots with long shots spent a 12-trial
            # budget on them before TPE's draws (quickstart, 3 workers: 44.75 req/s
            # against 49.36 without them, benchmarks/workers.py, 2026-11-28).
            proposals = self.long_shots.batch(n)
        if proposals:
            self.name = proposals[0].proposer
        return proposals

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        # The long shots lie outside the first proposer's space: it is told its own kind.
        self.long_shots.tell(proposal, outcome)
        if proposal.proposer == LongShots.name:
            self.name = LongShots.name
        else:
            self.first.tell(proposal, outcome)
            self._first_spent = False


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
            move = _move(space, name, old, new, "a long shot, its rule ruled it out")
            if move is not None:
                yield move


def _move(
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
