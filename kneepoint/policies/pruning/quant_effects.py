"""What changing the weight quantization should do, and what w4a16 would cost in latency.

The served checkpoint decides which ``--quantization`` values load at all
(``held_conditions``): fp8 quantizes a bf16/fp16 checkpoint at load, while awq/gptq (w4a16)
and modelopt_fp4 (NVFP4) load only a checkpoint quantized that way. On a bf16 checkpoint the
rule prices fp8; the 4-bit values are out of reach, and ``checkpoint_advice`` says what
serving an AWQ/GPTQ checkpoint (or an NVFP4 one, on FP4 tensor cores) instead would do, priced
by the same physics: more KV room, but slower steps once they are
compute-bound (the issue's RTX 6000 Ada / Qwen2.5-14B mix: preemptions 262 -> 132, short-class
ITL p50 182 -> 557 ms). On a checkpoint that is already quantized nothing is left to switch.
"""

from __future__ import annotations

from kneepoint.physics import checkpoint_of
from kneepoint.policies.pruning.knob_effects import (
    Effect,
    Situation,
    damped,
    kv_ratio,
    sped_up,
    step_ratio,
)
from kneepoint.records import Condition, Observation

W4A16_RISK = (
    "w4a16 dequantises every weight on the GEMMs' critical path: decode slows (higher ITL) "
    "once steps carry more than a few hundred tokens, though it frees KV room"
)
"""The latency risk stated wherever w4a16 comes up (the issue's measurement, above)."""


def held_conditions(observation: Observation) -> frozenset[Condition]:
    """The checkpoint conditions the served model meets (what its name or flag says it is),
    whether the GPU runs vLLM's Marlin kernels, and whether the device is a GPU."""
    found: set[Condition] = set()
    if observation.gpu.runs_marlin:
        found.add("marlin_kernels")
    if observation.gpu.architecture != "cpu":
        found.add("gpu_device")
    device = frozenset(found)
    engine = observation.engine
    checkpoint = checkpoint_of(engine.model, engine.quantization)
    if checkpoint is None:
        return device | {"unquantized_checkpoint"}
    if checkpoint == "awq":
        return device | {"awq_checkpoint"}
    if checkpoint == "gptq":
        return device | {"gptq_checkpoint"}
    if checkpoint == "nvfp4":
        return device | {"nvfp4_checkpoint"}
    return device  # an int8 W8A8 checkpoint: only vLLM's own detection loads it


def quantization(sit: Situation) -> Effect | str:
    """The quantization knob's rule: fp8 on a bf16 checkpoint, nothing on a quantized one."""
    obs = sit.observation
    if sit.engine.gemm in ("w4a16", "w8a16"):
        checkpoint = checkpoint_of(obs.engine.model, obs.engine.quantization)
        return f"the checkpoint is already {checkpoint} (weight-only): {W4A16_RISK}"
    if sit.engine.gemm == "int8":
        return "the checkpoint is already int8 W8A8 (compressed-tensors)"
    if sit.engine.gemm == "fp4":
        return "the checkpoint is already NVFP4 (4-bit weights and activations)"
    if obs.engine.quantization is not None:
        return f"the weights are already quantized ({obs.engine.quantization})"
    return _fp8(sit)


def _fp8(sit: Situation) -> Effect | str:
    obs = sit.observation
    if sit.binding == "compute" and not obs.gpu.has_fp8:
        return (
            f"{obs.gpu.name} has no fp8 tensor cores: fp8 weights run weight-only and the "
            "math stays bf16"
        )
    if sit.binding == "cache":
        if obs.engine.kv_cache_memory_bytes is not None:
            return "the KV pool is pinned in bytes: memory freed from the weights stays unused"
        ratio = kv_ratio(sit, quantization="fp8")
        if isinstance(ratio, str):
            return f"fp8 weights: {ratio}"
        reason = f"fp8 weights free memory for {ratio - 1:+.0%} KV tokens (changes outputs)"
        return Effect("to", damped(ratio), reason, target="fp8")
    # Without a priced step, the real H100's measured gain (+10.2%, tests/fixtures/real).
    ratio = step_ratio(sit, obs.engine.replace(quantization="fp8")) or 1.1
    what = (
        "speed up large GEMMs (far less than the datasheet's 2x) and halve weight reads"
        if obs.gpu.has_fp8
        else "halve weight reads (weight-only: the math stays bf16)"
    )
    reason = f"fp8 weights {what}: the observed step runs {ratio:.2f}x faster (changes outputs)"
    return Effect("to", sped_up(sit, ratio), reason, target="fp8")


def checkpoint_advice(sit: Situation, left_out: tuple[str, ...]) -> str:
    """Why the values ``left_out`` cannot be tried on this checkpoint, and what serving an
    AWQ/GPTQ checkpoint (and, on a GPU with FP4 tensor cores, an NVFP4 one) would do: its KV
    room and its observed step, priced."""
    w4a16 = tuple(v for v in left_out if v != "modelopt_fp4")
    parts = [_w4a16_advice(sit, w4a16)] if w4a16 else []
    if "modelopt_fp4" in left_out:
        parts.append(_fp4_advice(sit))
    return "; ".join(parts)


def _fp4_advice(sit: Situation) -> str:
    obs = sit.observation
    head = f"modelopt_fp4 needs an NVFP4 checkpoint, which {obs.engine.model} is not"
    if not obs.gpu.has_fp4:
        return f"{head} (and the {obs.gpu.name} has no FP4 tensor cores: it would run as AWQ)"
    return f"{head}; serving one would give {_served_as(sit, 'modelopt_fp4')} (changes outputs)"


def _w4a16_advice(sit: Situation, left_out: tuple[str, ...]) -> str:
    obs = sit.observation
    model = obs.engine.model
    head = f"{', '.join(left_out)} need a checkpoint quantized that way, which {model} is not"
    # what vLLM serves an AWQ checkpoint with: Marlin on NVIDIA Ampere and newer
    probe = "awq_marlin" if obs.gpu.runs_marlin else "awq"
    return f"{head}; serving one would give {_served_as(sit, probe)}: {W4A16_RISK}"


def _served_as(sit: Situation, quantization: str) -> str:
    """What serving the checkpoint as ``quantization`` would give: its KV room and the
    observed step priced."""
    if sit.engine.kv_cache_memory_bytes is not None:
        room = "no KV room (the pool is pinned in bytes)"
    else:
        ratio = kv_ratio(sit, quantization=quantization)
        room = ratio if isinstance(ratio, str) else f"{ratio - 1:+.0%} KV tokens"
    speed = step_ratio(sit, sit.observation.engine.replace(quantization=quantization))
    step = "" if speed is None else f", the observed step {_slower(speed)}"
    return f"{room}{step}"


def _slower(speed_ratio: float) -> str:
    """A before/after step-time ratio in words."""
    if speed_ratio < 1.0:
        return f"{1.0 / speed_ratio:.2f}x slower"
    return f"{speed_ratio:.2f}x faster"
