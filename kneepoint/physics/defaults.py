"""An engine config with every default filled in the way recent vLLM fills it.

``None`` in an EngineConfig means "the engine decides"; the memory model, the roofline and the
simulator need the concrete value. Defaults follow vLLM 0.20-0.33 on a GPU: the API server's
batch caps depend on the GPU's memory (1024 sequences / 8192 tokens on >= 70 GiB GPUs other
than the A100, else 256 / 2048), memory utilisation 0.92, prefix caching and async scheduling on.
vLLM's CPU build (0.32: ``EngineArgs.get_batch_defaults`` and ``CpuPlatform``) defaults the API
server to 128 sequences and 2048 tokens a step, in KV blocks of 128 tokens. A server reports
its block size in ``vllm:cache_config_info``; where it has, that wins over these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from pydantic import Field, JsonValue

from kneepoint.physics.quantization import SCHEMES, Gemm, scheme_for
from kneepoint.physics.speculation import SYNC_METHODS
from kneepoint.records import GIB, EngineConfig, GpuSpec, KneepointError, ModelSpec, Record

DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
DEFAULT_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
CPU_MAX_NUM_SEQS = 128
CPU_MAX_NUM_BATCHED_TOKENS = 2048
_LARGE_GPU_BYTES = 70 * GIB

# Bytes per element of a KV cache dtype ("auto" follows the weights).
KV_DTYPE_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "nvfp4": 0.5625,  # 4-bit values plus one fp8 scale per 16
}


class ResolvedEngine(Record):
    """Every knob concrete. Field meanings as in EngineConfig."""

    max_num_seqs: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    gpu_memory_utilization: float = Field(gt=0.0, le=1.0)
    kv_cache_memory_bytes: int | None
    max_model_len: int = Field(ge=1)
    kv_dtype_bytes: float = Field(gt=0.0)
    linear_weight_bytes: float = Field(gt=0.0)
    """Bytes per weight of the linear layers (embeddings stay at the stored dtype)."""
    fp8_compute: bool
    """Linear layers run on fp8 tensor cores (fp8 weights on a GPU that has them)."""
    gemm: Gemm = "native"
    """How the linear layers compute (``kneepoint.physics.quantization``); fp8 only where the
    GPU has fp8 tensor cores."""
    enable_prefix_caching: bool
    block_size: int = Field(ge=1)
    async_scheduling: bool
    enforce_eager: bool
    tensor_parallel_size: int = Field(ge=1)
    long_prefill_token_threshold: int = Field(ge=0)
    stream_interval: int = Field(ge=1)
    api_server_count: int = Field(default=1, ge=1)
    data_parallel_size: int = Field(default=1, ge=1)
    expert_parallel: bool = False
    kv_offloading_bytes: int = Field(default=0, ge=0)
    """Host memory KV blocks are offloaded to (0: no offloading)."""
    speculative_tokens: int = Field(default=0, ge=0)
    """Draft tokens an n-gram lookup proposes per decoding step (0: no speculation)."""


class UnmodeledSettingError(KneepointError, ValueError):
    """An engine setting the physics has no model for."""


def resolve_engine(engine: EngineConfig, gpu: GpuSpec, model: ModelSpec) -> ResolvedEngine:
    """Fill the engine's defaults for this GPU and model."""
    large = gpu.memory_bytes >= _LARGE_GPU_BYTES and gpu.architecture != "ampere"
    kv_dtype = engine.kv_cache_dtype or "auto"
    if kv_dtype != "auto" and kv_dtype not in KV_DTYPE_BYTES:
        raise UnmodeledSettingError(f"kv_cache_dtype {kv_dtype!r} is not modeled")
    drafts = _draft_tokens(engine.speculative_config)
    try:
        scheme = scheme_for(engine.model, engine.quantization)
    except KeyError:
        known = ", ".join([*SCHEMES, "compressed-tensors (an int8 w8a8 or NVFP4 checkpoint)"])
        raise UnmodeledSettingError(
            f"quantization {engine.quantization!r} is not modeled (modeled: {known})"
        ) from None
    fp8 = scheme is not None and scheme.gemm == "fp8" and gpu.has_fp8
    seqs, tokens, block = (
        (CPU_MAX_NUM_SEQS, CPU_MAX_NUM_BATCHED_TOKENS, CPU_BLOCK_SIZE)
        if gpu.is_cpu
        else (1024, 8192, DEFAULT_BLOCK_SIZE)
        if large
        else (256, 2048, DEFAULT_BLOCK_SIZE)
    )
    # vLLM's throughput mode doubles both batch limits where they are left to their defaults
    # (vllm/engine/arg_utils.py, 0.17 on); interactivity changes only CUDA-graph sizes.
    scale = 2 if engine.performance_mode == "throughput" else 1
    return ResolvedEngine(
        max_num_seqs=engine.max_num_seqs or seqs * scale,
        max_num_batched_tokens=engine.max_num_batched_tokens or tokens * scale,
        gpu_memory_utilization=engine.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
        kv_cache_memory_bytes=engine.kv_cache_memory_bytes,
        max_model_len=engine.max_model_len or model.max_position_embeddings,
        kv_dtype_bytes=KV_DTYPE_BYTES.get(kv_dtype, model.weight_dtype_bytes),
        linear_weight_bytes=scheme.weight_bytes if scheme else model.weight_dtype_bytes,
        fp8_compute=fp8,
        gemm=_gemm(scheme.gemm if scheme else "native", gpu),
        enable_prefix_caching=_on(engine.enable_prefix_caching, default=True),
        block_size=engine.block_size or block,
        async_scheduling=_on(engine.async_scheduling, default=True) and not drafts.sync,
        enforce_eager=_on(engine.enforce_eager, default=False),
        tensor_parallel_size=engine.tensor_parallel_size or 1,
        long_prefill_token_threshold=engine.long_prefill_token_threshold or 0,
        stream_interval=engine.stream_interval or 1,
        # vLLM 0.32's `vllm serve` starts one API server per data-parallel replica unless
        # told otherwise (vllm/entrypoints/cli/serve.py: "Defaulting api_server_count to
        # data_parallel_size")
        api_server_count=engine.api_server_count or engine.data_parallel_size or 1,
        data_parallel_size=engine.data_parallel_size or 1,
        expert_parallel=_on(engine.enable_expert_parallel, default=False),
        speculative_tokens=drafts.k,
        kv_offloading_bytes=round((engine.kv_offloading_size or 0.0) * GIB),
    )


class _Drafts(NamedTuple):
    k: int
    sync: bool


def _draft_tokens(spec: Mapping[str, JsonValue] | None) -> _Drafts:
    """n-gram speculation's draft length, and whether vLLM turns async scheduling off for
    it; a drafter the physics has no model for (a draft model, EAGLE, MTP) is refused."""
    if spec is None:
        return _Drafts(0, sync=False)
    method, k = spec.get("method"), spec.get("num_speculative_tokens")
    if method != "ngram":
        raise UnmodeledSettingError(
            f"speculative decoding by {method!r} is not modeled (modeled: n-gram lookup)"
        )
    if not isinstance(k, int) or k < 1:
        raise UnmodeledSettingError(
            f"speculative_config needs num_speculative_tokens >= 1 (got {k!r})"
        )
    return _Drafts(k, sync=method in SYNC_METHODS)


def _gemm(gemm: Gemm, gpu: GpuSpec) -> Gemm:
    # fp8 weights on a GPU without fp8 tensor cores run weight-only (vLLM's fp8 Marlin path):
    # priced as before, by their bytes alone, for want of a measured dequantisation cost there.
    if gemm == "fp8" and not gpu.has_fp8:
        return "native"
    if gemm == "fp4" and not gpu.has_fp4:
        if not gpu.runs_marlin:
            raise UnmodeledSettingError(
                f"an NVFP4 checkpoint does not run on the {gpu.display_name}: vLLM serves it "
                "on NVIDIA GPUs only (FP4 tensor cores from Blackwell, the Marlin kernel "
                "weight-only from Ampere)"
            )
        return "w4a16"  # vLLM's FP4 Marlin kernel, as AWQ's: 4-bit weights, 16-bit math
    return gemm


def _on(value: bool | None, default: bool) -> bool:
    return default if value is None else value
