"""The proposers' search space: the pruned candidates around the incumbent, with the
incumbent's effective value of each knob (engine defaults filled in, as the physics resolves
them), the factors learned from earlier moves, and what a trial costs out of the budget left."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import JsonValue

from kneepoint.physics.defaults import resolve_engine
from kneepoint.policies.diagnosis.context import ConfigContext
from kneepoint.records.proposal import KnobCandidate, Pruning, SearchSpace, TrialPrice


def search_space(
    pruning: Pruning,
    context: ConfigContext,
    incumbent_objective: float | None,
    *,
    learned: Mapping[str, float] | None = None,
    price: TrialPrice | None = None,
    most_gain: float | None = None,
) -> SearchSpace:
    """The proposers' space: the candidates around the incumbent, with the incumbent's
    effective value of each (engine defaults filled in), each priced at most ``most_gain``
    (the objective's own bound, ``ObjectiveRules.most_gain``)."""
    observation = context.observation
    engine, memory = context.engine, context.memory
    if engine is None or memory is None:
        resolve_engine(observation.engine, observation.gpu, observation.model)  # names why
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
        candidates=capped(pruning.candidates, most_gain),
        learned_factors=dict(learned or {}),
        price=price,
    )


def capped(
    candidates: Sequence[KnobCandidate], most_gain: float | None
) -> tuple[KnobCandidate, ...]:
    """The candidates, each priced at most ``most_gain``, saying so."""
    if most_gain is None:
        return tuple(candidates)
    said = (
        f"; capped at {most_gain:.2f}x: goodput cannot pass the offered rate, and the "
        f"incumbent already serves {1.0 / most_gain:.1%} of it"
    )
    return tuple(
        c.model_copy(update={"predicted_ratio": most_gain, "reason": c.reason + said})
        if c.predicted_ratio > most_gain
        else c
        for c in candidates
    )
