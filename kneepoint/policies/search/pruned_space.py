"""The proposers' search space: the pruned candidates around the incumbent, with the
incumbent's effective value of each knob (engine defaults filled in, as the physics resolves
them), the factors learned from earlier moves, and what a trial costs out of the budget left."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from kneepoint.physics import drafter_free, resolve_engine
from kneepoint.policies.diagnosis import ConfigContext
from kneepoint.policies.search.worth import phi
from kneepoint.records import KnobCandidate, Pruning, SearchSpace, TrialPrice


def search_space(
    pruning: Pruning,
    context: ConfigContext,
    incumbent_objective: float | None,
    *,
    learned: Mapping[str, float] | None = None,
    price: TrialPrice | None = None,
    most_gain: float | None = None,
    short_of: ShortOfRate | None = None,
) -> SearchSpace:
    """The proposers' space: the candidates around the incumbent, with the incumbent's
    effective value of each (engine defaults filled in), each priced in the objective's terms
    (``in_objective_terms``)."""
    observation = context.observation
    engine, memory = context.engine, context.memory
    if engine is None or memory is None:
        resolve_engine(drafter_free(observation.engine), observation.gpu, observation.model)
        raise AssertionError("a configuration the physics resolves has a context")
    config = observation.engine
    resolved = engine.model_dump()
    current: dict[str, JsonValue] = {}
    for candidate in pruning.candidates:
        name = candidate.knob.name
        if name == "kv_cache_memory_bytes":
            current[name] = config.kv_cache_memory_bytes or int(memory.kv_bytes)
        elif name == "kv_cache_dtype":
            current[name] = config.kv_cache_dtype or "auto"
        elif name in resolved:
            current[name] = resolved[name]
        else:
            current[name] = getattr(config, name)
    return SearchSpace(
        incumbent=config,
        incumbent_objective=incumbent_objective,
        current_values=current,
        candidates=in_objective_terms(pruning.candidates, most_gain, short_of),
        learned_factors=dict(learned or {}),
        price=price,
    )


@dataclass(frozen=True)
class ShortOfRate:
    """A fixed offered rate the incumbent's knee falls short of (goodput at a rate), and the
    spread of a prediction's error (log ratio, ``kneepoint.policies.search.worth``)."""

    rate_rps: float
    knee_rps: float
    spread_log: float

    def chance_served(self, ratio: float) -> float:
        """The chance that a move predicted at ``ratio`` carries the knee past the rate."""
        return phi(math.log(ratio * self.knee_rps / self.rate_rps) / self.spread_log)


def in_objective_terms(
    candidates: Sequence[KnobCandidate],
    most_gain: float | None,
    short_of: ShortOfRate | None = None,
) -> tuple[KnobCandidate, ...]:
    """Each candidate's capacity ratio as a ratio of the objective, saying so where they
    differ. Goodput never passes the offered rate: a ratio is capped at ``most_gain``
    (``ObjectiveRules.most_gain``). And where the incumbent's knee falls short of that rate, a
    move that carries the knee past it serves the whole rate, ``most_gain`` times the
    incumbent's goodput, whatever its capacity ratio: its ratio is what it is expected to give,
    ``most_gain`` by the chance that it does so, its capacity ratio otherwise. Priced at its
    capacity ratio alone, a move that lets a knee short of the rate serve all of it reads far
    below what it gives, and a noisy incumbent's floor turns it away (prefix caching in
    tests/test_real_multiturn.py)."""
    if most_gain is None:
        return tuple(candidates)
    return tuple(_in_objective_terms(c, most_gain, short_of) for c in candidates)


def _in_objective_terms(
    candidate: KnobCandidate, most_gain: float, short_of: ShortOfRate | None
) -> KnobCandidate:
    ratio = min(candidate.predicted_ratio, most_gain)
    served = 1.0 / most_gain
    chance = 0.0 if short_of is None else short_of.chance_served(candidate.predicted_ratio)
    if chance >= 0.01 and most_gain > ratio:
        assert short_of is not None
        ratio = chance * most_gain + (1.0 - chance) * ratio
        said = (
            f"; {ratio:.2f}x expected in goodput ({chance:.0%} chance that "
            f"{candidate.predicted_ratio:.2f}x the incumbent's {short_of.knee_rps:.3g} req/s "
            f"knee serves the {short_of.rate_rps:g} req/s offered: {most_gain:.2f}x the "
            f"{served:.1%} of it the incumbent serves)"
        )
    elif candidate.predicted_ratio > most_gain:
        said = (
            f"; capped at {most_gain:.2f}x: goodput cannot pass the offered rate, and the "
            f"incumbent already serves {served:.1%} of it"
        )
    else:
        return candidate
    update = {"predicted_ratio": ratio, "reason": candidate.reason + said}
    return candidate.model_copy(update=update)
