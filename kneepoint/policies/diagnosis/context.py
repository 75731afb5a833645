"""One configuration as the policies read it, worked out once: the observation, the engine
with its defaults resolved and its memory plan. The diagnosis, the pruning and the search
space of one sweep all read the same context instead of resolving the engine each."""

from __future__ import annotations

from dataclasses import dataclass

from kneepoint.physics import (
    MemoryPlan,
    ResolvedEngine,
    UnmodeledSettingError,
    drafter_free,
    plan_memory,
    resolve_engine,
)
from kneepoint.records import Observation


@dataclass(frozen=True, slots=True)
class ConfigContext:
    observation: Observation
    engine: ResolvedEngine | None
    """None where the configuration sets something the physics does not model."""
    memory: MemoryPlan | None


def context_of(observation: Observation) -> ConfigContext:
    """The observation's engine resolved: its defaults filled for the study's device, and
    the block size the server itself reported (``cache_config_info``) where it did."""
    try:
        engine = resolve_engine(
            drafter_free(observation.engine), observation.gpu, observation.model
        )
    except UnmodeledSettingError:
        return ConfigContext(observation, None, None)
    reported = observation.saturated.signals.block_size
    if reported is not None and reported != engine.block_size:
        engine = engine.model_copy(update={"block_size": reported})
    return ConfigContext(
        observation, engine, plan_memory(observation.gpu, observation.model, engine)
    )
