"""The time of one engine step from what it computes and what it reads.

A step runs the linear layers (GEMMs) over every scheduled token (2 x active params FLOPs per
token, streaming the weights once), attention over each request's context (reading its KV),
and elementwise work per token (norms, activations, rotary embedding, sampling, and with fp8
the activations' quantisation). Compute time (FLOPs at peak x efficiency) and memory time
(bytes at bandwidth x efficiency) overlap, so the GEMM and attention time is a smooth maximum
of the two; the per-token work adds on. fp8 weights halve the weight bytes and, on GPUs with
fp8 tensor cores, speed up the GEMMs' compute by a factor that grows with the batch towards a
measured ceiling (not the datasheet's 2x), while attention stays as it is: so fp8's gain is
large at small batches (weight streaming) and shrinks where steps are compute-bound at
moderate batch sizes, as on a real H100. 4-bit weight-only formats (AWQ, GPTQ) read a quarter
of the bytes but dequantise every weight on the GEMMs' critical path (``physics.gemm``): faster
at tiny batches, slower than bf16 once steps are compute-bound. Kernel-launch overhead per
step and per layer (smaller with CUDA graphs), tensor-parallel all-reduces and an MoE model's
gathering of its data-parallel ranks' tokens (``physics.experts``) add on. CPU
work (scheduling, output processing) adds to the step unless async scheduling overlaps it
with the GPU.

Sliding-window layers attend over, and read the KV of, at most the window (``BatchShape``'s
window sums); full-attention layers over the whole context.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.physics.experts import ExpertLayout, dispatch_s, expert_bytes_per_gpu
from kneepoint.physics.gemm import LinearGemm
from kneepoint.physics.memory import weight_bytes_per_gpu
from kneepoint.records import Efficiency, GpuSpec, ModelSpec

__all__ = ["BatchShape", "Efficiency", "Roofline", "StepCost", "step_cost", "window_pairs"]


class BatchShape(NamedTuple):
    """What one step computes, aggregated over its scheduled requests.

    A named tuple, not a record: the simulator builds one per step, on its hot path, and a
    frozen dataclass took four times as long to build. Build it with ``BatchShape.of`` or
    accumulate the sums directly.
    """

    num_requests: int
    new_tokens: int
    attention_pairs: float
    """Sum over requests of new x (context + (new + 1) / 2): query-key pairs attended."""
    kv_tokens: int
    """Sum over requests of context + new: KV entries read or written."""
    samples: int
    """Requests that produce an output token in this step."""
    window_attention_pairs: float | None = None
    """As ``attention_pairs`` with each query attending at most the sliding window's keys;
    None where nobody clipped them (sliding layers are then priced as full ones)."""
    window_kv_tokens: int | None = None
    """As ``kv_tokens`` with each request's reads clipped to the window (None: not clipped)."""
    draft_lookups: int = 0
    """Sequences whose n-gram draft for the next step is looked up on the CPU (every decoding
    one, with n-gram speculative decoding on)."""

    @classmethod
    def of(
        cls, requests: Iterable[tuple[int, int]], samples: int | None = None, window: int = 0
    ) -> BatchShape:
        """From ``(new_tokens, context_tokens)`` pairs; by default every request samples.
        With a sliding ``window`` (tokens) the window-clipped sums are filled in too."""
        items = list(requests)
        clipped = window > 0
        return cls(
            num_requests=len(items),
            new_tokens=sum(new for new, _ in items),
            attention_pairs=sum(new * (ctx + (new + 1) / 2) for new, ctx in items),
            kv_tokens=sum(new + ctx for new, ctx in items),
            samples=len(items) if samples is None else samples,
            window_attention_pairs=(
                sum(window_pairs(new, ctx, window) for new, ctx in items) if clipped else None
            ),
            window_kv_tokens=(
                sum(min(ctx + new, window + new - 1) for new, ctx in items) if clipped else None
            ),
        )


def window_pairs(new: int, context: int, window: int) -> float:
    """Query-key pairs of ``new`` tokens after ``context`` when each query sees at most
    ``window`` keys (itself included): the sum over k = context+1 .. context+new of min(k, W)."""
    first, last = context + 1, context + new
    if last <= window:
        return new * (context + (new + 1) / 2)
    if first >= window:
        return float(new * window)
    return (window - first + 1) * (first + window) / 2 + (last - window) * window


class StepCost(NamedTuple):
    """A step's time and its breakdown, in seconds (a hot-path value, like BatchShape)."""

    compute_s: float
    memory_s: float
    weight_read_s: float
    kv_read_s: float
    gpu_roofline_s: float
    launch_s: float
    allreduce_s: float
    gpu_s: float
    cpu_s: float
    wall_s: float
    flops: float
    bytes_read: float
    compute_share: float
    """Share of the roofline time owed to compute rather than memory traffic (0..1)."""


class Roofline:
    """Step costs for one GPU, model and engine configuration.

    Everything that does not depend on the batch (parameter counts, weight bytes per GPU,
    KV bytes per token, peaks) is worked out once here: the simulator asks for a cost every
    step.
    """

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        engine: ResolvedEngine,
        efficiency: Efficiency | None = None,
    ) -> None:
        eff = efficiency or _DEFAULT_EFFICIENCY
        self._eff, self._engine, self._gpu, self._model = eff, engine, gpu, model
        self._gemm = LinearGemm(gpu, model, engine, eff)
        self.linear_peak_tflops = self._gemm.peak_tflops
        """Tensor-core peak of the linear layers: fp8 or int8 where both the weights and the GPU
        have it."""
        self._linear_flops_per_token = 2.0 * model.active_params()
        full, sliding = model.full_attention_layers, model.sliding_window_layers
        self._attention_flops_per_pair = 4.0 * full * model.num_attention_heads * model.head_dim
        """Per query-key pair over the full-attention layers; the sliding ones below."""
        self._window_flops_per_pair = 4.0 * sliding * model.num_attention_heads * model.head_dim
        self._attention_flop_s = gpu.bf16_tflops * 1e12 * eff.attention_mfu
        quantise = self._gemm.quantises_activations
        self._token_s = eff.token_overhead_s + (eff.fp8_token_overhead_s if quantise else 0.0)
        self._kv_bytes_per_token = model.kv_bytes_per_token(
            engine.kv_dtype_bytes, engine.tensor_parallel_size, layers=full
        )
        self._window_kv_bytes_per_token = model.kv_bytes_per_token(
            engine.kv_dtype_bytes, engine.tensor_parallel_size, layers=sliding
        )
        self._weight_bytes = weight_bytes_per_gpu(model, engine)
        tp, dp = engine.tensor_parallel_size, engine.data_parallel_size
        self._experts = ExpertLayout(model, tp, dp, engine.expert_parallel)
        self._expert_bytes = expert_bytes_per_gpu(model, engine)
        self._dispatches = model.is_moe and self._experts.ranks != 1
        """Whether ``dispatch_s`` is more than zero: asked once, not every step."""
        bandwidth = gpu.hbm_tb_s * 1e12
        self._weight_bandwidth = bandwidth * eff.weight_bandwidth
        self._kv_bandwidth = bandwidth * eff.kv_bandwidth
        per_layer = (
            eff.layer_overhead_eager_s if engine.enforce_eager else eff.layer_overhead_graph_s
        )
        self._fixed_launch_s = eff.step_overhead_s + per_layer * model.num_layers

    def _weights_read(self, tokens: int) -> float:
        """Weight bytes streamed in one step. Dense models read all weights; an MoE model
        reads the experts its tokens route to (``kneepoint.physics.experts``)."""
        unread = self._expert_bytes * (1.0 - self._experts.read_fraction(tokens))
        return self._weight_bytes - unread

    def step(self, batch: BatchShape) -> StepCost:
        """Time of one step that runs ``batch`` (at least one request)."""
        if batch.num_requests < 1 or batch.new_tokens < 1:
            raise ValueError("a step needs at least one scheduled token")
        eff, engine = self._eff, self._engine
        tp = engine.tensor_parallel_size
        linear_flops = self._linear_flops_per_token * batch.new_tokens / tp
        clipped_pairs, clipped_kv = batch.window_attention_pairs, batch.window_kv_tokens
        attention_flops = (
            self._attention_flops_per_pair * batch.attention_pairs
            + self._window_flops_per_pair
            * (batch.attention_pairs if clipped_pairs is None else clipped_pairs)
        ) / tp
        weights = self._weights_read(batch.new_tokens) if self._expert_bytes else self._weight_bytes
        linear_s = self._gemm.seconds(linear_flops, batch.new_tokens, weights / self._weight_bytes)
        attention_s = attention_flops / self._attention_flop_s
        kv_bytes = self._kv_bytes_per_token * batch.kv_tokens + self._window_kv_bytes_per_token * (
            batch.kv_tokens if clipped_kv is None else clipped_kv
        )
        weight_read_s = weights / self._weight_bandwidth
        kv_read_s = kv_bytes / self._kv_bandwidth
        # GEMMs, attention and their memory traffic overlap as one smooth maximum (fitted to
        # the real H100 steps, this prices them within 6%: tests/test_calibration.py); the
        # per-token elementwise work runs beside neither.
        p = eff.smooth_max_power  # (written out here: this runs every simulated step)
        compute_p, memory_p = (linear_s + attention_s) ** p, (weight_read_s + kv_read_s) ** p
        total = compute_p + memory_p
        overlapped, compute_share = total ** (1.0 / p), compute_p / total if total else 0.0
        token_s = self._token_s * batch.new_tokens / tp
        roofline_s = overlapped + token_s
        compute_share *= overlapped / roofline_s
        launch_s = self._fixed_launch_s + eff.request_overhead_s * batch.num_requests
        allreduce_s = (
            _allreduce_s(self._gpu, self._model, tp, batch.new_tokens, eff) if tp > 1 else 0.0
        ) + (
            dispatch_s(self._gpu, self._model, self._experts.ranks, batch.new_tokens, eff)
            if self._dispatches
            else 0.0
        )
        gpu_s = roofline_s + launch_s + allreduce_s
        cpu_s = cpu_seconds(eff, batch, engine.stream_interval)
        return StepCost(
            compute_s=linear_s + attention_s,
            memory_s=weight_read_s + kv_read_s,
            weight_read_s=weight_read_s,
            kv_read_s=kv_read_s,
            gpu_roofline_s=roofline_s,
            launch_s=launch_s,
            allreduce_s=allreduce_s,
            gpu_s=gpu_s,
            cpu_s=cpu_s,
            wall_s=max(gpu_s, cpu_s) if engine.async_scheduling else gpu_s + cpu_s,
            flops=linear_flops + attention_flops,
            bytes_read=weights + kv_bytes,
            compute_share=compute_share,
        )


def cpu_seconds(eff: Efficiency, batch: BatchShape, stream_interval: int) -> float:
    """The engine core's CPU work for one step: scheduling, per-request bookkeeping, output
    processing per streamed chunk and n-gram draft lookups."""
    return (
        eff.cpu_step_s
        + eff.cpu_request_s * batch.num_requests
        + eff.cpu_chunk_s * batch.samples / stream_interval
        + eff.cpu_draft_s * batch.draft_lookups
    )


def step_cost(
    gpu: GpuSpec,
    model: ModelSpec,
    engine: ResolvedEngine,
    batch: BatchShape,
    efficiency: Efficiency | None = None,
) -> StepCost:
    """Time of one step that runs ``batch``; for many steps, build one Roofline instead."""
    return Roofline(gpu, model, engine, efficiency).step(batch)


_DEFAULT_EFFICIENCY = Efficiency()


def _allreduce_s(gpu: GpuSpec, model: ModelSpec, tp: int, tokens: int, eff: Efficiency) -> float:
    """Two ring all-reduces of the hidden state per layer under tensor parallelism."""
    if tp == 1:
        return 0.0
    message = tokens * model.hidden_size * model.weight_dtype_bytes
    ring_bytes = 2.0 * (tp - 1) / tp * message
    per_reduce = ring_bytes / (gpu.interconnect_gb_s * 1e9) + eff.allreduce_latency_s
    return 2.0 * model.num_layers * per_reduce
