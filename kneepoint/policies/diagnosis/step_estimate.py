"""What the GPU should have spent on one engine step, from the model, the GPU and the batch the
engine's own metrics describe: the fallback when GPU counters are missing.

vLLM's metrics say how many steps ran per second, how many tokens each step carried and how
many of them were sampled (decodes), how many sequences were running and how full the KV cache
was. That is enough to rebuild the average step's shape and price it with the same roofline
the simulator runs (``kneepoint.physics``): its compute-versus-memory split says which of the
two the busy GPU waits on, and its GPU time against the observed step time says how much of
each step the GPU sat idle while the CPU scheduled (a scheduling wall). Efficiencies of a real
GPU differ from the model's by tens of percent, so evidence from here weighs less than a
measured counter.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneepoint.physics import BatchShape, KvLayout, ResolvedEngine, Roofline, kv_layout
from kneepoint.records import Efficiency, GpuSpec, ModelSpec, Signals, Workload, mean_length_tokens


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """The average step at a load point, priced by the roofline."""

    observed_step_s: float
    """1 / steps per second: the step's wall time as the engine ran it."""
    gpu_s: float
    """Roofline + launch + all-reduce time the model predicts for that step."""
    launch_s: float
    """Of which kernel-launch overhead: GPU time that is scheduling's, not math or memory."""
    compute_share: float
    """Share of the roofline time owed to math rather than memory traffic (0..1)."""
    context_tokens: float
    """Mean context per running sequence the estimate used."""

    @property
    def busy_fraction(self) -> float:
        """Predicted GPU time over observed step time, at most 1."""
        return min(1.0, self.gpu_s / self.observed_step_s)

    @property
    def launch_fraction(self) -> float:
        """Kernel-launch overhead over observed step time."""
        return min(1.0, self.launch_s / self.observed_step_s)


def observed_shape(
    signals: Signals, workload: Workload | None = None, layout: KvLayout | None = None
) -> tuple[BatchShape, float] | None:
    """The average step the engine's metrics describe (tokens per step, the decodes among
    them, running sequences and their context), and that context per sequence; None when the
    metrics cannot describe a step. ``layout`` (the model's KV cache groups) reads the KV
    usage of a model with sliding-window layers right and clips their attention."""
    steps, tokens = signals.steps_per_s, signals.tokens_per_step_mean
    if not steps or not tokens:
        return None
    decodes = min(tokens, (signals.generation_tokens_per_s or 0.0) / steps)
    prefill = max(0.0, tokens - decodes)
    running = max(signals.running_mean or 0.0, decodes, 1.0)
    context = _context_tokens(signals, running, workload, layout)
    window = layout.window_tokens if layout is not None else 0
    seen = min(context, window) if window else context
    shape = BatchShape(
        num_requests=max(1, round(running)),
        new_tokens=max(1, round(tokens)),
        attention_pairs=decodes * context + prefill * context / 2.0,
        kv_tokens=round(running * context + prefill),
        samples=round(decodes),
        window_attention_pairs=decodes * seen + prefill * min(context / 2.0, seen),
        window_kv_tokens=round(running * seen + prefill),
    )
    return shape, context


def estimate_step(
    signals: Signals,
    gpu: GpuSpec,
    model: ModelSpec,
    engine: ResolvedEngine,
    workload: Workload | None = None,
    *,
    observed_step_s: float | None = None,
    efficiency: Efficiency | None = None,
) -> StepEstimate | None:
    """The average step's estimate; None when the metrics cannot describe a step.

    The observed step time is 1 / steps per second, which holds while the engine steps back
    to back (a queue in front of it); an engine that idles between requests runs fewer steps
    than that, so the caller passes the step time it saw instead (the median ITL)."""
    found = observed_shape(signals, workload, kv_layout(model, engine))
    if found is None or not signals.steps_per_s:
        return None
    shape, context = found
    cost = Roofline(gpu, model, engine, efficiency).step(shape)
    return StepEstimate(
        observed_step_s=observed_step_s or 1.0 / signals.steps_per_s,
        gpu_s=cost.gpu_s,
        launch_s=cost.launch_s,
        compute_share=cost.compute_share,
        context_tokens=context,
    )


def _context_tokens(
    signals: Signals, running: float, workload: Workload | None, layout: KvLayout | None
) -> float:
    """KV tokens in use per running sequence, else the workload's typical context. Where
    the workload's prompts share prefixes and the cache serves them, the pool holds each
    shared block once though every sequence attends over it: the context each sequence
    reads is then at least the workload's (a simulated agent loop, 2,297 tokens per
    sequence read off the pool where the workload's turns average ~4,000, priced its step
    at 40% of what it took and named the scheduler)."""
    usage, blocks, block = signals.kv_usage_mean, signals.num_gpu_blocks, signals.block_size
    shared = (
        workload is not None
        and (workload.prefix_groups or workload.conversational)
        and (signals.prefix_hit_rate or 0.0) > 0.0
    )
    floor = typical_context_tokens(workload) if shared and workload is not None else 1.0
    if usage is not None and blocks and block:
        if layout is not None and layout.groups > 1:
            return max(floor, layout.tokens_holding(usage * blocks / running))
        return max(floor, usage * blocks * block / running)
    if workload is None:
        return 1024.0  # nothing better known: a typical chat context
    return typical_context_tokens(workload)


def typical_context_tokens(workload: Workload) -> float:
    """A running sequence's mean context half-way through its answer (prefix, the history
    of a conversation's earlier turns, prompt and half the output), over the requests of
    every traffic class."""
    prefixes = {g.name: g.prefix_tokens for g in workload.prefix_groups}
    total = sum(c.weight * c.mean_turns() for c in workload.classes)
    return (
        sum(
            c.weight
            * c.mean_turns()
            * (
                prefixes.get(c.prefix_group or "", 0)
                + c.mean_history_tokens()
                + mean_length_tokens(c.input_tokens)
                + mean_length_tokens(c.output_tokens) / 2.0
            )
            for c in workload.classes
        )
        / total
    )
