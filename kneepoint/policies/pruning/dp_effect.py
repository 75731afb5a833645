"""What a change of data-parallel size should do per GPU: the rule pruning asks when the study
gives one server several GPUs (``StudySpec.gpus``).

Replicas share nothing but the balancer and the API servers: ``d`` of them serve about ``d``
times the requests on ``d`` times the GPUs, so per GPU a move gains nothing and loses what the
balancer does (the simulated Llama-3.1-8B chat server on H100s: 41.6, 81.6, 171.0 and 317.0
req/s at DP 1, 2, 4 and 8, 0.95x per GPU at 8, benchmarks/layouts.py; vLLM 0.32's balancer,
``kneepoint.sim.replicas``).
A per-GPU search therefore leaves it out and tunes one replica; the winner is then served with
as many replicas as the study's GPUs hold (``kneepoint.load.node``), which is where DP beats
one wide server: TP 1 x DP 8 over TP 8 for a model that fits one GPU.
"""

from __future__ import annotations

from kneepoint.policies.pruning.knob_effects import Effect, Situation


def data_parallel(sit: Situation) -> Effect | str:
    now = sit.engine.data_parallel_size
    return (
        f"{now} replica(s) now: replicas multiply capacity and GPUs alike, no gain per GPU; "
        "the winner is served with as many replicas as the study's GPUs hold"
    )
