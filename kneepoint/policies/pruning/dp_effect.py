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

A mixture-of-experts model's ranks are not replicas: vLLM spreads its experts over every rank's
GPUs (``kneepoint.physics.experts``), so more ranks leave each GPU fewer expert bytes to hold
and stream, and add a gather of the ranks' tokens to every MoE layer. Each rank keeps its own
scheduler and batch, so per GPU a size gains what one rank's batch gains in today's step time
(the roofline with the experts spread further, at most what the freed KV memory holds).
"""

from __future__ import annotations

from kneepoint.policies.pruning.knob_effects import Effect, Situation
from kneepoint.policies.pruning.tp_effect import best_per_gpu, grown


def data_parallel(sit: Situation) -> Effect | str:
    now = sit.engine.data_parallel_size
    if sit.observation.model.is_moe:
        return _shared_experts(sit, now)
    return (
        f"{now} replica(s) now: replicas multiply capacity and GPUs alike, no gain per GPU; "
        "the winner is served with as many replicas as the study's GPUs hold"
    )


def _shared_experts(sit: Situation, now: int) -> Effect | str:
    sizes = [c for c in sit.choices if isinstance(c, int) and c != now]
    if not sizes:
        return f"no other size fits the study's GPUs (at {now})"
    return best_per_gpu([_ranks(sit, now, size) for size in sizes])


def _ranks(sit: Situation, now: int, size: int) -> Effect | str:
    found = grown(sit, data_parallel_size=size)
    if isinstance(found, str):
        return f"DP {now} -> {size}: {found}"
    kv, per_gpu = found.kv, found.gain
    width = sit.engine.tensor_parallel_size
    reason = (
        f"DP {now} -> {size}: the experts spread over {size * width} GPUs, not {now * width}; "
        f"each rank's KV pool holds {kv:.2f}x the tokens and runs {per_gpu:.2f}x the batch in "
        "today's step time: that much per GPU"
    )
    return Effect("to", per_gpu, reason, target=size)
