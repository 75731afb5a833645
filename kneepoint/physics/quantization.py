"""Weight quantization schemes as the physics prices them, and what a checkpoint already holds.

A scheme says how many bytes one linear-layer weight takes and how the GEMMs compute with it:
``fp8``, ``int8`` (W8A8) and ``fp4`` (NVFP4 W4A4) run on low-precision tensor cores;
``w4a16`` (AWQ, GPTQ) stores 4-bit weights and dequantises them to 16 bits inside the GEMM,
so the math stays bf16/fp16 and the dequantisation comes on top (priced in the roofline).

vLLM's ``--quantization`` values modeled (vLLM ``QuantizationMethods``):

- ``fp8``: online W8A8 from a bf16/fp16 checkpoint (weight-only on GPUs without fp8 cores).
- ``awq``, ``awq_marlin``, ``gptq``, ``gptq_marlin``: need a checkpoint quantized that way
  (vLLM reads its ``quantization_config``; a bf16 checkpoint fails to load). With no flag
  vLLM detects the checkpoint's method and picks the Marlin kernel on Ampere and newer.
- ``modelopt_fp4``: an NVFP4 checkpoint (NVIDIA's ModelOpt, or llm-compressor's under
  ``compressed-tensors``): 4-bit E2M1 weights and activations on Blackwell's FP4 tensor
  cores; on older NVIDIA GPUs vLLM serves it weight-only ("Your GPU does not have native
  support for FP4 computation but FP4 quantization is being used. Weight-only FP4 compression
  will be used leveraging the Marlin kernel.", vllm/model_executor/layers/quantization/
  utils/marlin_utils_fp4.py), priced as w4a16.
- ``compressed-tensors``: llm-compressor checkpoints; the int8 W8A8 and NVFP4 schemes are
  modeled.
  vLLM has no online int8 for dense models (docs/features/quantization/int8.md: W8A8 int8
  comes from an llm-compressor checkpoint), so int8 is never something a search switches on.

A served model's name tells its checkpoint (``Qwen/Qwen2.5-14B-Instruct-AWQ``,
``...-GPTQ-Int8``, ``RedHatAI/...-quantized.w8a8``): the naming of the public quantized
checkpoints, the only thing a study says about its checkpoint besides the quantization flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Gemm = Literal["native", "fp8", "int8", "fp4", "w4a16", "w8a16"]
"""How the linear layers compute: at the stored dtype, on fp8, int8 or fp4 tensor cores, or
with 4/8-bit weights dequantised to 16 bits in the kernel."""
Checkpoint = Literal["awq", "gptq", "w8a8", "nvfp4"]
"""A pre-quantized checkpoint's method (None: the stored bf16/fp16 weights)."""

GROUP_SIZE = 128
"""Weights sharing one scale and zero point in AWQ/GPTQ checkpoints (AutoAWQ's and GPTQ's
default ``group_size``, the one the published Qwen/Llama AWQ and GPTQ checkpoints use)."""


def packed_bytes_per_weight(bits: int) -> float:
    """Bytes per weight of a group-quantized checkpoint: ``bits`` per weight, plus per group of
    128 one fp16 scale (2 bytes) and one zero point of ``bits`` bits (AutoAWQ ``qweight``,
    ``scales``, ``qzeros``; GPTQ adds a 4-byte ``g_idx`` per input row, under 0.001 bytes
    per weight). 4-bit: 0.5 + 2.5 / 128 = 0.52 bytes."""
    return bits / 8 + (2.0 + bits / 8) / GROUP_SIZE


NVFP4_BYTES_PER_WEIGHT = 0.5 + 1.0 / 16
"""An NVFP4 weight: 4 bits, plus one fp8 (E4M3) scale per block of 16 (NVIDIA's NVFP4 format,
"Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025: 4.5 bits a
value; its one fp32 scale per tensor is under 0.001 bytes a weight)."""


@dataclass(frozen=True, slots=True)
class Scheme:
    """How one quantization method stores and computes the linear layers."""

    weight_bytes: float
    gemm: Gemm


SCHEMES: dict[str, Scheme] = {
    "fp8": Scheme(1.0, "fp8"),
    "awq": Scheme(packed_bytes_per_weight(4), "w4a16"),
    "awq_marlin": Scheme(packed_bytes_per_weight(4), "w4a16"),
    "gptq": Scheme(packed_bytes_per_weight(4), "w4a16"),
    "gptq_marlin": Scheme(packed_bytes_per_weight(4), "w4a16"),
    "modelopt_fp4": Scheme(NVFP4_BYTES_PER_WEIGHT, "fp4"),
}
"""vLLM ``--quantization`` values modeled whatever the checkpoint's name says."""
_W8A8_INT8 = Scheme(1.0, "int8")  # plus one fp32 scale per output channel: < 0.001 B/weight
_GPTQ_8BIT = Scheme(packed_bytes_per_weight(8), "w8a16")
CHECKPOINT_METHODS: dict[str, Checkpoint] = {
    "awq": "awq",
    "awq_marlin": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "modelopt_fp4": "nvfp4",
}
"""Methods that need a checkpoint quantized that way."""


def checkpoint_of(model_id: str, quantization: str | None) -> Checkpoint | None:
    """The pre-quantized method of the served checkpoint, from the quantization flag or from
    the model's name; None for a bf16/fp16 checkpoint (or one whose name does not say)."""
    if quantization in CHECKPOINT_METHODS:
        return CHECKPOINT_METHODS[quantization]
    name = model_id.lower()
    if re.search(r"nvfp4|\bfp4\b", name):  # nvidia/Llama-3.1-8B-Instruct-FP4, ...-NVFP4
        return "nvfp4"
    if "awq" in name:
        return "awq"
    if "gptq" in name:
        return "gptq"
    if re.search(r"w8a8|int8", name):
        return "w8a8"
    return None


def scheme_for(model_id: str, quantization: str | None) -> Scheme | None:
    """The scheme a server runs: the flag's, else what vLLM detects in the checkpoint. None:
    the stored dtype. Raises KeyError for a flag the physics does not model."""
    checkpoint = checkpoint_of(model_id, quantization)
    eight_bit = re.search(r"int8|8bit|w8a16", model_id.lower()) is not None
    if checkpoint == "gptq" and eight_bit:
        return _GPTQ_8BIT
    if checkpoint == "nvfp4" and quantization in (None, "compressed-tensors"):
        return SCHEMES["modelopt_fp4"]  # vLLM reads the format from the checkpoint
    if quantization is not None and quantization != "compressed-tensors":
        return SCHEMES[quantization]
    if checkpoint in ("awq", "gptq"):
        return SCHEMES[f"{checkpoint}_marlin"]  # vLLM's default kernel for the checkpoint
    if checkpoint == "w8a8":
        return _W8A8_INT8
    if quantization == "compressed-tensors":
        raise KeyError(quantization)  # a scheme the checkpoint's name does not tell
    return None
