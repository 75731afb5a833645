"""The proposers' search space: the pruned candidates around the incumbent, with the
incumbent's effective value of each knob (engine defaults filled in, as the physics resolves
them), the factors learned from earlier moves, and what a trial costs out of the budget left."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import JsonValue

from kneepoint.physics.defaults import resolve_engine
from kneepoint.policies.diagnosis.context import ConfigContext
from kneepoint.records.proposal import Pruning, SearchSpace, TrialPrice


def search_space(
    pruning: Pruning,
    context: ConfigContext,
    incumbent_objective: float | None,
    learned: Mapping[str, float] | None = None,
    price: TrialPrice | None = None,
) -> SearchSpace:
    """The proposers' space: the candidates around the incumbent, with the incumbent's
    effective value of each (engine defaults filled in)."""
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
        candidates=pruning.candidates,
        learned_factors=dict(learned or {}),
        price=price,
    )
