"""The simulated server a configuration describes: one engine, or data-parallel replicas of
it behind vLLM's balancer (``kneepoint.sim.replicas``)."""

from __future__ import annotations

from collections.abc import Mapping

from kneepoint.physics import Efficiency
from kneepoint.records import DraftAcceptance, EngineConfig, GpuSpec, ModelSpec
from kneepoint.sim.engine import SimEngine
from kneepoint.sim.replicas import Replicas

Serving = SimEngine | Replicas
"""What a load point runs on the virtual clock."""


def serving(
    gpu: GpuSpec,
    model: ModelSpec,
    config: EngineConfig,
    efficiency: Efficiency | None = None,
    *,
    acceptance: Mapping[str, DraftAcceptance] | None = None,
) -> Serving:
    """The server ``config`` starts: one engine, or its data-parallel replicas."""
    count = config.data_parallel_size or 1
    engines = [
        SimEngine(gpu, model, config, efficiency, acceptance=acceptance) for _ in range(count)
    ]
    return engines[0] if count == 1 else Replicas(engines)
