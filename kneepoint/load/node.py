"""The winner as the study's node serves it: a per-GPU objective measures one replica, and
the GPUs the study gives the server beyond it run further replicas of it
(``--data-parallel-size``), behind vLLM's internal load balancer."""

from __future__ import annotations

from kneepoint.load.objective import rules
from kneepoint.records import EngineConfig, StudySpec


def node_replicas(study: StudySpec, config: EngineConfig) -> int:
    """Replicas of ``config`` the study's GPUs hold where it names none (1: as it is). An
    MoE model gets none: its data-parallel ranks share the experts (``physics.experts``), so
    more of them is another configuration, one the search prices and measures itself."""
    if not rules(study.objective).per_gpu or config.data_parallel_size is not None:
        return 1
    if study.model.is_moe:
        return 1
    return max(1, study.gpus // config.gpu_count)


def filled_node(study: StudySpec, config: EngineConfig) -> EngineConfig:
    """``config`` with the study's idle GPUs running replicas of it: the simulated Llama-3.1-8B
    chat server on H100s held 41.6 req/s at DP 1 and 317.0 at DP 8 (0.95x of eight
    replicas' worth, the balancer's loss), where TP 8 held 62.1 (benchmarks/layouts.py)."""
    replicas = node_replicas(study, config)
    return config if replicas == 1 else config.replace(data_parallel_size=replicas)
