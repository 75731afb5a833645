"""The compute time of a step's linear layers (GEMMs) under each weight format.

bf16/fp16 weights run at the bf16 tensor-core peak x mfu. fp8 and int8 W8A8 GEMMs run on
low-precision tensor cores whose datasheet peak is twice bf16's (every GPU in the catalogue:
fp8 where it has fp8 cores; int8 on all of them, e.g. A100 624 vs 312, H100 1979 vs 989,
RTX 6000 Ada 728.5 vs 364.2 TOPS dense, NVIDIA spec sheets), but reach only a measured
fraction of that gain, growing with the batch. Weight-only formats (w4a16: AWQ, GPTQ) keep the
bf16 math and dequantise every weight inside the kernel, in registers (Marlin), once per
``M_TILE_TOKENS`` tokens: at batch 1 that work hides under the 4x smaller weight reads, but
once the GEMM is compute-bound it comes on top of the math. The memory side (weight bytes) is
the roofline's.
"""

from __future__ import annotations

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.records import Efficiency, GpuSpec, ModelSpec

M_TILE_TOKENS = 64
"""Tokens one pass of a Marlin GEMM multiplies with each weight it dequantises: at most four
16-row m-blocks per thread block (``thread_m_blocks`` <= 4 in IST-DASLab/marlin and vLLM's
``marlin`` kernels); a larger batch runs as 64-row slices, each dequantising the weights
again."""
LOW_PRECISION_PEAK_RATIO = 2.0
"""Dense fp8 / int8 tensor-core peak over bf16's on every catalogued GPU (spec sheets above)."""


class LinearGemm:
    """GEMM compute time of one configuration (worked out once; ``seconds`` is on the hot
    path)."""

    def __init__(
        self, gpu: GpuSpec, model: ModelSpec, engine: ResolvedEngine, eff: Efficiency
    ) -> None:
        self._eff = eff
        self._low_precision = engine.gemm in ("fp8", "int8", "fp4")
        peak = gpu.bf16_tflops * (LOW_PRECISION_PEAK_RATIO if self._low_precision else 1.0)
        if engine.gemm == "fp8" and gpu.fp8_tflops:
            peak = gpu.fp8_tflops
        if engine.gemm == "fp4" and gpu.fp4_tflops:
            peak = gpu.fp4_tflops
        self.peak_tflops = peak
        """Tensor-core peak of the linear layers (the datasheet's, not what they reach)."""
        self.quantises_activations = self._low_precision
        """W8A8 GEMMs quantise each token's activations first (per-token work)."""
        self._flop_s = gpu.bf16_tflops * 1e12 * eff.mfu
        tp = engine.tensor_parallel_size
        embedding = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
        dequantised = engine.gemm in ("w4a16", "w8a16")
        self._linear_total = (model.total_params() - embedding) / tp if dequantised else 0.0
        self._linear_active = (model.active_params() - embedding) / tp

    def _speedup(self, tokens: int) -> float:
        """W8A8 GEMMs' compute speed-up over bf16 at this many tokens (1 for other formats).
        NVFP4's W4A4 GEMMs get the same: their datasheet peak is twice fp8's, but no
        measurement of vLLM's FP4 GEMMs says what share of it they reach, so they are priced
        no faster than fp8's measured ones; their gain here is the weight bytes and the KV
        room."""
        if not self._low_precision:
            return 1.0
        eff = self._eff
        return 1.0 + (eff.fp8_gemm_speedup - 1.0) * tokens / (tokens + eff.fp8_gemm_half_tokens)

    def seconds(self, flops: float, tokens: int, read_fraction: float) -> float:
        """Compute time of ``flops`` of GEMMs over ``tokens`` tokens, of which the weights read
        are ``read_fraction`` of all (below 1 for an MoE model's routed experts)."""
        compute = flops / (self._flop_s * self._speedup(tokens))
        if not self._linear_total:
            return compute
        elements = self._linear_total * read_fraction
        # Tokens each dequantised weight multiplies (all of them for a dense model; an expert
        # sees only the tokens routed to it), in passes of M_TILE_TOKENS.
        passes = max(1.0, tokens * self._linear_active / elements / M_TILE_TOKENS)
        dequant_flops = elements * passes * self._eff.w4a16_dequant_flops_per_weight
        return compute + dequant_flops / self._flop_s
