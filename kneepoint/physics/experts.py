"""Where a mixture-of-experts model's routed experts sit on a server's GPUs, and what they cost
one step: the weight bytes a GPU streams and the collectives that move tokens to the experts.

vLLM 0.32 spreads the routed experts over every GPU of the server, data-parallel ranks
included: ``FusedMoEParallelConfig.make`` (vllm/model_executor/layers/fused_moe/config.py)
flattens the MoE layers' tensor parallelism across TP x DP ranks ("We parallelize across all
DP*TP ranks for the MoE layers regardless of if we are using EP", vLLM PR #14305). Without
``--enable-expert-parallel`` each GPU holds a 1/(TP x DP) slice of every expert; with it, whole
experts, E/(TP x DP) of them. So an MoE server's DP ranks are not replicas: they hold their own
KV caches and schedulers but share the experts, and each MoE layer gathers every rank's tokens
and scatters the results back (vLLM's default ``all2all_backend``, "allgather_reducescatter",
config/parallel.py).

What a step streams: a slice of every expert its tokens touch (the same on every GPU), or,
under EP, the touched experts among the GPU's own, where the step waits for the busiest GPU.
Tokens route uniformly here (k of E experts each); a model whose router favours some experts
makes EP's busiest GPU busier still, which this does not price.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.records import Efficiency, GpuSpec, ModelSpec


def expert_params(model: ModelSpec) -> float:
    """Parameters in the routed experts (0 for a dense model): active = shared + experts x k/E
    and total = shared + experts, so experts = (total - active) / (1 - k/E)."""
    if not model.is_moe:
        return 0.0
    k_over_n = model.experts_per_token / model.num_experts
    return (model.total_params() - model.active_params()) / (1.0 - k_over_n)


def expert_bytes_per_gpu(model: ModelSpec, engine: ResolvedEngine) -> float:
    """The routed experts' weights on one GPU: spread over every GPU of the server."""
    shards = engine.tensor_parallel_size * engine.data_parallel_size
    return expert_params(model) * engine.linear_weight_bytes / shards


class ExpertLayout:
    """The routed experts of ``model`` on one GPU of a server of ``tp`` x ``dp`` GPUs."""

    def __init__(self, model: ModelSpec, tp: int, dp: int, expert_parallel: bool) -> None:
        self.shards = tp * dp
        """GPUs the experts are spread over."""
        self.ranks = dp
        """Data-parallel ranks whose tokens every MoE layer sees."""
        self.expert_parallel = expert_parallel and self.shards > 1
        self._experts = model.num_experts
        self._k_over_n = model.experts_per_token / model.num_experts if model.is_moe else 0.0

    def read_fraction(self, tokens: int) -> float:
        """Share of this GPU's expert weights one step streams, with ``tokens`` new tokens on
        each data-parallel rank (ranks step together; each is priced as carrying this one's
        batch)."""
        touched = 1.0 - (1.0 - self._k_over_n) ** (tokens * self.ranks)
        if not self.expert_parallel:
            return touched
        local = max(1, self._experts // self.shards)
        return _busiest(local, self.shards, round(touched * 1e4)) / local


@lru_cache(maxsize=4096)
def _busiest(local: int, gpus: int, touched_e4: int) -> float:
    """Expected touched experts on the busiest of ``gpus`` GPUs that own ``local`` experts
    each, every expert touched with probability ``touched_e4`` / 10^4: E[max] of ``gpus``
    independent Binomial(local, p), summed as P(max >= j) = 1 - F(j - 1)^gpus."""
    p = touched_e4 / 1e4
    cdf, expected = 0.0, 0.0
    for j in range(local):
        cdf += comb(local, j) * p**j * (1.0 - p) ** (local - j)
        expected += 1.0 - min(1.0, cdf) ** gpus
    return expected


def dispatch_s(gpu: GpuSpec, model: ModelSpec, dp: int, tokens: int, eff: Efficiency) -> float:
    """One step's all-gather of every data-parallel rank's tokens before each MoE layer and
    reduce-scatter of the results after it (vLLM's default ``allgather_reducescatter``): each
    GPU receives the other ranks' hidden states, ``tokens`` apiece, and sends its own back
    reduced. Zero for a dense model or one rank."""
    if not model.is_moe or dp == 1:
        return 0.0
    moved = (dp - 1) * tokens * model.hidden_size * model.weight_dtype_bytes
    per_layer = 2.0 * (moved / (gpu.interconnect_gb_s * 1e9) + eff.allreduce_latency_s)
    return per_layer * model.num_layers
