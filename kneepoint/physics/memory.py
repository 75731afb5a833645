"""How many KV-cache tokens a configuration gets, computed the way vLLM computes it, and
whether it starts at all.

vLLM V1 asks for ``total memory x gpu_memory_utilization``, loads the weights, profiles one
forward pass at ``max_num_batched_tokens`` tokens (the activation peak), counts non-torch
memory (NCCL, cuBLAS workspaces) and CUDA-graph pools, and gives the rest to the KV cache in
blocks of ``block_size`` tokens, laid out in KV cache groups as its hybrid KV cache manager
does for models with sliding-window layers (``kv_layout``). ``kv_cache_memory_bytes`` replaces
that subtraction with an exact size. Refusals carry vLLM's own wording so probes and the
simulator can classify them the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.physics.experts import expert_bytes_per_gpu, expert_params
from kneepoint.physics.kv_manager import KvLayout, kv_layout
from kneepoint.records import GIB, MIB, GpuSpec, ModelSpec, Record

NON_TORCH_BYTES = 0.5 * GIB
"""NCCL buffers, cuBLAS workspaces, the CUDA context's allocations outside torch."""
CUDA_GRAPH_BYTES = 0.4 * GIB
"""Memory pools of captured CUDA graphs (none with enforce_eager)."""


class StartupRefusal(Record):
    """Why a configuration cannot start, in the engine's words."""

    kind: Literal["weights_oom", "no_kv_memory", "max_model_len_too_long", "unsupported"]
    message: str


class MemoryPlan(Record):
    """Where one GPU's memory goes under a configuration (per GPU under tensor parallelism)."""

    total_bytes: int
    requested_bytes: float
    weight_bytes: float
    activation_bytes: float
    overhead_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    """Over every layer: what one token costs where all of its KV is kept."""
    block_size: int
    num_blocks: int = Field(ge=0)
    """Blocks in the pool; each holds ``block_size`` tokens of one KV cache group."""
    layout: KvLayout
    max_model_len: int
    request_blocks_max: int = Field(ge=1)
    """Blocks one max_model_len request may hold at its peak (all groups together)."""
    refusal: StartupRefusal | None = None

    @property
    def kv_tokens(self) -> int:
        """The pool in tokens as vLLM logs it ("GPU KV cache size")."""
        return self.layout.logged_tokens(self.num_blocks)

    @property
    def max_concurrency(self) -> float:
        """How many max_model_len requests fit at once (vLLM logs this at startup)."""
        if self.layout.sliding_groups:
            return self.num_blocks / self.request_blocks_max
        return self.kv_tokens / self.max_model_len

    def kv_needed_bytes(self) -> float:
        """KV memory one max_model_len request needs (vLLM's startup check)."""
        if self.layout.sliding_groups:
            return self.request_blocks_max * self.layout.block_bytes
        return self.max_model_len * self.kv_bytes_per_token


def weight_bytes_per_gpu(model: ModelSpec, engine: ResolvedEngine) -> float:
    """Weights on one GPU: quantized linear layers plus embeddings at the stored dtype, an MoE
    model's routed experts spread over the data-parallel ranks too."""
    embedding_params = (
        model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    )
    experts = expert_params(model)
    dense_params = model.total_params() - embedding_params - experts
    dense = dense_params * engine.linear_weight_bytes + embedding_params * model.weight_dtype_bytes
    return dense / engine.tensor_parallel_size + expert_bytes_per_gpu(model, engine)


def activation_peak_bytes(model: ModelSpec, engine: ResolvedEngine) -> float:
    """Peak of vLLM's profiling runs: one forward pass at the token budget, or the sampler's
    fp32 logits for max_num_seqs requests, whichever is larger."""
    tp = engine.tensor_parallel_size
    per_token = model.weight_dtype_bytes * (
        3 * model.intermediate_size / tp + 6 * model.hidden_size
    )
    forward = engine.max_num_batched_tokens * per_token
    sampler = engine.max_num_seqs * model.vocab_size * 4.0
    return max(forward, sampler)


def plan_memory(gpu: GpuSpec, model: ModelSpec, engine: ResolvedEngine) -> MemoryPlan:
    """The memory plan of a configuration, with the refusal vLLM would give, if any."""
    total = gpu.memory_bytes
    weights = weight_bytes_per_gpu(model, engine)
    activation = activation_peak_bytes(model, engine)
    overhead = NON_TORCH_BYTES + (0.0 if engine.enforce_eager else CUDA_GRAPH_BYTES)
    requested = total * engine.gpu_memory_utilization
    if engine.kv_cache_memory_bytes is not None:
        kv = float(engine.kv_cache_memory_bytes)
        requested = weights + activation + overhead + kv
    else:
        kv = requested - weights - activation - overhead
    per_token = model.kv_bytes_per_token(engine.kv_dtype_bytes, engine.tensor_parallel_size)
    layout = kv_layout(model, engine)
    plan = MemoryPlan(
        total_bytes=total,
        requested_bytes=requested,
        weight_bytes=weights,
        activation_bytes=activation,
        overhead_bytes=overhead,
        kv_bytes=kv,
        kv_bytes_per_token=per_token,
        block_size=engine.block_size,
        num_blocks=layout.num_blocks(kv),
        layout=layout,
        max_model_len=engine.max_model_len,
        request_blocks_max=layout.blocks_per_request_max(
            engine.max_model_len, engine.max_num_batched_tokens
        ),
    )
    longest = _longest_fitting(layout, plan.num_blocks, engine)
    refusal = _refusal(plan, longest)
    if refusal is None and engine.kv_offloading_bytes and not gpu.offloads_kv:
        refusal = OFFLOAD_REFUSED
    return plan.model_copy(update={"refusal": refusal})


OFFLOAD_REFUSED = StartupRefusal(
    kind="unsupported",
    message="Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs",
)
"""vLLM 0.32's CPU build's own refusal of --kv-offloading-size, word for word."""


def _longest_fitting(layout: KvLayout, num_blocks: int, engine: ResolvedEngine) -> int:
    """The longest request the pool holds, up to max_model_len, found by bisection as vLLM's
    ``_estimate_max_model_len_from_groups`` finds it (num_blocks x block_size for one
    full-attention group)."""
    low, high = 0, engine.max_model_len
    while low < high:
        mid = (low + high + 1) // 2
        if layout.blocks_per_request_max(mid, engine.max_num_batched_tokens) <= num_blocks:
            low = mid
        else:
            high = mid - 1
    return low


def _refusal(plan: MemoryPlan, longest: int) -> StartupRefusal | None:
    if plan.weight_bytes + plan.activation_bytes + plan.overhead_bytes > plan.total_bytes or (
        plan.requested_bytes > plan.total_bytes
    ):
        free_mib = max(0.0, plan.total_bytes - plan.weight_bytes) / MIB
        return StartupRefusal(
            kind="weights_oom",
            message=(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                f"{plan.activation_bytes / MIB:.2f} MiB. GPU 0 has a total capacity of "
                f"{plan.total_bytes / GIB:.2f} GiB of which {free_mib:.2f} MiB is free."
            ),
        )
    if plan.kv_bytes <= 0 or plan.num_blocks == 0:
        return StartupRefusal(
            kind="no_kv_memory",
            message=(
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."
            ),
        )
    if plan.num_blocks < plan.request_blocks_max:
        needed = plan.kv_needed_bytes()
        return StartupRefusal(
            kind="max_model_len_too_long",
            message=(
                "ValueError: To serve at least one request with the models's max seq len "
                f"({plan.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which is "
                f"larger than the available KV cache memory ({plan.kv_bytes / GIB:.2f} GiB). "
                "Based on the available memory, the estimated maximum model length is "
                f"{longest}. Try increasing `gpu_memory_utilization` or decreasing "
                "`max_model_len` when initializing the engine."
            ),
        )
    return None
