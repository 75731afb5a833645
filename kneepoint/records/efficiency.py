"""How close real kernels come to a GPU's peaks, and the fixed costs around them: the constants
the roofline prices a step with. The defaults come from public models of vLLM on an H100 and,
where a field says so, from the real H100 recordings in tests/fixtures/real; a calibration
(``kneepoint calibrate``) fits them to a real engine's recorded sweeps."""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import InputRecord


class Efficiency(InputRecord):
    """Fractions of peak that real kernels reach, and fixed costs (public vLLM-on-H100 models)."""

    mfu: float = Field(default=0.5, gt=0.0, le=1.0)
    """GEMM fraction of tensor-core peak at typical chunk sizes."""
    attention_mfu: float = Field(default=0.5, gt=0.0, le=1.0)
    """Attention kernels' fraction of the bf16 tensor-core peak."""
    fp8_gemm_speedup: float = Field(default=1.3, ge=1.0, le=2.0)
    """Compute-bound speed-up of fp8 (W8A8) GEMMs over bf16 on GPUs with fp8 tensor cores,
    reached only by large GEMMs (see ``fp8_gemm_half_tokens``): the datasheet says 2.0; real
    H100 vLLM 0.26 steps of ~600 tokens ran 3-7% faster (tests/fixtures/real, fitted), and a
    12B model's 8k-token prefill chunks gave +14% on its ceiling
    (configs/scenarios/gemma12b-h100-random.yaml)."""
    fp8_gemm_half_tokens: float = Field(default=4096.0, gt=0.0)
    """Tokens per step at which fp8 GEMMs reach half of their compute-bound speed-up: small
    GEMMs are dominated by what fp8 does not speed up (activation quantisation, epilogues,
    tile quantisation), so the gain grows with the batch."""
    w4a16_dequant_flops_per_weight: float = Field(default=64.0, ge=0.0)
    """Cost of dequantising one 4-bit weight to fp16 inside a weight-only GEMM (unpack,
    subtract the zero point, scale), in bf16 tensor-core FLOPs at ``mfu``, paid once per
    64-token pass over the weights (``kneepoint.physics.gemm.M_TILE_TOKENS``) on top of the
    pass's 2 x 64 FLOPs of math: a compute-bound w4a16 GEMM runs at 128 / (128 + 64) = 2/3 of
    bf16's rate, while at batch 1 the single pass hides under 4x smaller weight reads. Chosen
    to match: Qwen2.5-14B AWQ on an RTX 6000 Ada at 32 req/s (configs/scenarios/qwen14b-ada-
    mix.yaml: short-class ITL p50 182 -> 557 ms, long-class 216 -> 316 ms, with ~3x the KV
    pool admitting fuller steps); AutoAWQ's GitHub report #106 (Llama-2-13B decode at batch
    256 ~50% of fp16's speed, slightly faster at batch <= 32); Marlin's README (close to 4x
    over fp16 up to batch 16-32, less beyond)."""
    weight_bandwidth: float = Field(default=0.78, gt=0.0, le=1.0)
    kv_bandwidth: float = Field(default=0.8, gt=0.0, le=1.0)
    """Fraction of peak bandwidth attention reads the KV cache at. 0.8 replays the real H100
    recordings (tests/fixtures/real, vLLM 0.26.0): Gemma-3-12B's decode steps read ~390 KB
    of KV per token of context, and at 0.5 the simulator's token gaps at 16 req/s came out
    +66% (37.8 against 22.8 ms) and its fp8 effect +3.9% against a real +22%; at 0.8, +8%
    and +22.1%. Llama-8B's short chat contexts hardly depend on it (capacities within 2%
    from 0.75 to 0.85)."""
    smooth_max_power: float = Field(default=4.0, ge=1.0)
    """p of (compute^p + memory^p)^(1/p) within one kind of kernel (the GEMMs, attention):
    large p is a hard max, 1 is no overlap."""
    token_overhead_s: float = Field(default=0.0, ge=0.0)
    """GPU time per scheduled token outside the GEMMs and attention (norms, activations,
    rotary embedding, sampling), the same whatever the weights' dtype."""
    fp8_token_overhead_s: float = Field(default=0.0, ge=0.0)
    """Per token, the activation quantisation fp8 GEMMs add."""
    step_overhead_s: float = Field(default=100e-6, ge=0.0)
    layer_overhead_graph_s: float = Field(default=30e-6, ge=0.0)
    layer_overhead_eager_s: float = Field(default=90e-6, ge=0.0)
    request_overhead_s: float = Field(default=3e-6, ge=0.0)
    allreduce_latency_s: float = Field(default=8e-6, ge=0.0)
    cpu_step_s: float = Field(default=300e-6, ge=0.0)
    """CPU-side scheduler and engine-core work per step."""
    cpu_request_s: float = Field(default=60e-6, ge=0.0)
    """CPU scheduling and bookkeeping per scheduled request (vLLM's engine core: the
    scheduler, input preparation, sampling output). On the real H100 recordings
    (tests/fixtures/real, Llama-8B, vLLM 0.26.0) the step time grows by ~95 us per running
    sequence past 100 of them, whatever the weights' dtype: at 64 req/s fp8 and bf16 ran
    27.6 and 29.5 ms steps with ~254 running although fp8 streams half the weight bytes, and
    NVML utilisation fell from 90-96% at 8 req/s to 78-87% there (the GPU waits on the CPU).
    With the output processing per chunk (``cpu_chunk_s``) beside it, 60 us replays the four
    Llama recordings' capacities within 3% (50 us: up to +6%, 70 us: fp8 -4%)."""
    cpu_chunk_s: float = Field(default=12e-6, ge=0.0)
    """Output processing per streamed chunk (detokenise, serialise, send)."""
    host_link: float = Field(default=0.8, gt=0.0, le=1.0)
    """Fraction of the host link's rate a KV load from host memory reaches: PCIe's 128b/130b
    encoding and packet headers leave ~85% of a x16 link's rate to payload."""
    cpu_draft_s: float = Field(default=2e-6, ge=0.0)
    """One sequence's n-gram draft lookup in a step, on the CPU: vLLM's Numba matcher spent
    1.9 s in all over a 5,000-request ShareGPT run (vllm-project/vllm PR #13365), about a
    million decoding sequence-steps."""
    frontend_latency_s: float = Field(default=0.005, ge=0.0)
    """The API server's share of each request's latency outside the engine's steps (HTTP,
    validation, tokenisation, handing the request to the engine core and the first chunk
    back): time to first token and end to end grow by it, token gaps do not. 5 ms is what
    `kneepoint calibrate` reads off the real H100 Llama-3.1-8B recordings (tests/fixtures/
    real/h100-llama8b-chat, vLLM 0.26; 6.8 ms off the Gemma-3-12B ones) with async
    scheduling's step of delay (``SimEngine.seen_by_s``) in the engine's share; the BLIS
    campaign's vLLM 0.15.1 servers, another client on another cluster, show 5.8-6.5 ms
    (tests/fixtures/published/blis-campaign/README.md)."""
    frontend_chunk_s: float = Field(default=0.0, ge=0.0)
    """The API server's serial work to stream one chunk (detokenise, serialise, write), on
    the one thread that also takes requests in (``kneepoint.sim.frontend``): 0 leaves the
    server out. ``kneepoint calibrate`` does not fit it: it paces the same token gaps as
    ``cpu_request_s``, and the real H100 recordings cannot tell the two apart (~85 us per
    chunk replays their 40 req/s gaps beside 6 us per sequence: tests/test_frontend.py)."""
