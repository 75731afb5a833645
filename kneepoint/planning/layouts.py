"""Which tensor-parallel layouts of a model exist on which GPUs, and the memory plan vLLM
makes for each (``kneepoint.physics.memory``): weights, activation peak and KV pool per GPU,
the concurrency the pool holds at the workload's lengths, and vLLM's refusal where it would not
start. Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from kneepoint.physics import (
    CHECKPOINT_METHODS,
    MemoryPlan,
    UnmodeledSettingError,
    checkpoint_of,
    plan_memory,
    resolve_engine,
)
from kneepoint.records import (
    GIB,
    EngineConfig,
    GpuSpec,
    Layout,
    ModelSpec,
    PlanLengths,
    WeightOption,
)

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
"""The sizes within one node (vLLM needs the heads to divide evenly; 8 GPUs to a node)."""
PCIE_TP_LIMIT = 2
"""Largest tensor-parallel size laid out without NVLink: past 2 GPUs a PCIe all-reduce is
several times the step's own time (32 GB/s against NVLink's 450, configs/gpus.yaml)."""
WEIGHT_FORMATS = (None, "fp8", "awq_marlin", "modelopt_fp4")
"""The weight formats the plan tries: as served, fp8 online, 4-bit AWQ (w4a16) where vLLM's
Marlin kernels run (``GpuSpec.runs_marlin``), and an NVFP4 checkpoint where the GPU has FP4
tensor cores (``GpuSpec.has_fp4``; elsewhere it runs as AWQ does, which the plan shows)."""


class Shape(NamedTuple):
    """One server's parallel layout: tensor-parallel size, data-parallel ranks, whole experts."""

    tp: int
    dp: int = 1
    ep: bool = False


def shapes(model: ModelSpec, gpus: int) -> list[Shape]:
    """The layouts the plan tries on a node of ``gpus``: each tensor-parallel size (the node
    filled with replicas of it); for a mixture-of-experts model also servers of 2, 4 ... data-
    parallel ranks that share the experts (``kneepoint.physics.experts``), the node filled
    with them, and the widest with whole experts per GPU too (vLLM's docs pair expert
    parallelism with wide data parallelism; sliced and whole differ by the busiest GPU's
    share alone)."""
    found = []
    for tp in TENSOR_PARALLEL_SIZES:
        found.append(Shape(tp))
        ranks = [dp for dp in TENSOR_PARALLEL_SIZES[1:] if tp * dp <= gpus]
        if model.is_moe and ranks:
            found += [Shape(tp, dp) for dp in ranks] + [Shape(tp, ranks[-1], True)]
    return found


def sized_engine(engine: EngineConfig, shape: Shape, lengths: PlanLengths) -> EngineConfig:
    """``engine`` laid out as ``shape`` with the right-sized max_model_len: what a layout plans
    and predicts."""
    return engine.model_copy(
        update={
            "tensor_parallel_size": shape.tp,
            "data_parallel_size": shape.dp if shape.dp > 1 else None,
            "enable_expert_parallel": True if shape.ep else None,
            "max_model_len": lengths.max_model_len,
        }
    )


def layout(
    gpu: GpuSpec,
    model: ModelSpec,
    engine: EngineConfig,
    shape: Shape,
    *,
    gpus: int,
    lengths: PlanLengths,
) -> Layout:
    """The memory plan of ``engine`` laid out as ``shape`` on ``gpus`` GPUs of ``gpu``, at
    the right-sized max_model_len (and at the study's own, where that differs)."""
    sized = sized_engine(engine, shape, lengths)
    base = Layout(
        gpu=gpu.name,
        tensor_parallel_size=shape.tp,
        data_parallel_size=shape.dp,
        expert_parallel=shape.ep,
        replicas=gpus // (shape.tp * shape.dp),
        max_model_len=lengths.max_model_len,
    )
    excluded = _excluded(gpu, model, shape.tp, gpus)
    if excluded is not None:
        return base.model_copy(update={"excluded": excluded})
    plan = plan_memory(gpu, model, resolve_engine(sized, gpu, model))
    as_configured = _refusal_as_configured(gpu, model, sized, engine.max_model_len, plan)
    return base.model_copy(
        update={
            "weight_gib": plan.weight_bytes / GIB,
            "activation_gib": plan.activation_bytes / GIB,
            "overhead_gib": plan.overhead_bytes / GIB,
            "kv_gib": max(0.0, plan.kv_bytes) / GIB,
            "kv_tokens": plan.kv_tokens if plan.refusal is None else 0,
            "concurrency_p50": _concurrency(plan, lengths.p50_tokens, sized),
            "concurrency_p99": _concurrency(plan, lengths.p99_tokens, sized),
            "refusal": None if plan.refusal is None else plan.refusal.message,
            "refusal_as_configured": as_configured,
            "weights": weight_options(gpu, model, sized),
        }
    )


def _excluded(gpu: GpuSpec, model: ModelSpec, tp: int, gpus: int) -> str | None:
    if tp > gpus:
        return f"needs {tp} GPUs; the node has {gpus}"
    if model.num_attention_heads % tp:
        # vLLM's check in ModelConfig.verify_with_parallel_config
        return (
            f"Total number of attention heads ({model.num_attention_heads}) must be "
            f"divisible by tensor parallel size ({tp})."
        )
    if tp > PCIE_TP_LIMIT and not gpu.nvlink:
        return f"tensor parallel size {tp} needs NVLink; the {gpu.display_name} has PCIe only"
    return None


def _refusal_as_configured(
    gpu: GpuSpec,
    model: ModelSpec,
    sized_config: EngineConfig,
    own_len: int | None,
    sized: MemoryPlan,
) -> str | None:
    if sized.refusal is not None:
        return None
    own = resolve_engine(sized_config.model_copy(update={"max_model_len": own_len}), gpu, model)
    if own.max_model_len == sized.max_model_len:
        return None
    refusal = plan_memory(gpu, model, own).refusal
    return None if refusal is None else refusal.message


def _concurrency(plan: MemoryPlan, tokens: int, engine: EngineConfig) -> float:
    """Requests of ``tokens`` each the pool holds at their end (0 where it does not start)."""
    if plan.refusal is not None:
        return 0.0
    budget = engine.max_num_batched_tokens or 2048
    return plan.num_blocks / plan.layout.blocks_per_request_max(tokens, budget)


def weight_options(
    gpu: GpuSpec, model: ModelSpec, engine: EngineConfig
) -> tuple[WeightOption, ...]:
    """Each weight format's KV pool on this layout (None where vLLM would refuse)."""
    options = []
    served = checkpoint_of(engine.model, engine.quantization)
    for method in WEIGHT_FORMATS:
        if method == "awq_marlin" and not gpu.runs_marlin:
            continue
        if method == "modelopt_fp4" and not gpu.has_fp4 and served != "nvfp4":
            continue
        if method is None and served is not None:
            continue  # the checkpoint is quantized already: it has no unquantized form here
        config = engine.model_copy(update={"quantization": method})
        try:
            plan = plan_memory(gpu, model, resolve_engine(config, gpu, model))
        except UnmodeledSettingError:
            continue
        needs = ""
        if method in CHECKPOINT_METHODS and served != CHECKPOINT_METHODS[method]:
            needs = f"a checkpoint quantized with {CHECKPOINT_METHODS[method].upper()}"
        label = method or _dtype(model)
        tokens = None if plan.refusal else plan.kv_tokens
        options.append(WeightOption(quantization=label, needs=needs, kv_tokens=tokens))
    return tuple(options)


def _dtype(model: ModelSpec) -> str:
    return {2.0: "bf16", 4.0: "fp32", 1.0: "fp8"}.get(model.weight_dtype_bytes, "as stored")
