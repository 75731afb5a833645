"""The signals a load point on the virtual clock exposes, as a real server's would be read.

Engine gauges (running, waiting, KV usage) are averaged over the steps of the stable window,
weighted by step time, the way a scraper polling /metrics would see them on average; counters
become rates; the finished requests' server-side latencies are summed as vLLM's e2e histogram
would count them between scrapes before and after the load; GPU activity comes from the
simulated NVML/GPM counters. Ground truth is not here: it stays with the simulator's own
records.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kneepoint.load import summarize
from kneepoint.records import Dist, GpuSample, Signals, SpecReading
from kneepoint.sim.deployment import Serving
from kneepoint.sim.engine import StepRecord
from kneepoint.sim.request import SimRequest
from kneepoint.sim.telemetry import GpuTelemetry


def _weighted(steps: Sequence[StepRecord], value: str) -> float | None:
    total = sum(s.cost.wall_s for s in steps)
    if total <= 0:
        return None
    return float(sum(getattr(s, value) * s.cost.wall_s for s in steps)) / total


def server_latency(finished: Sequence[SimRequest]) -> dict[str, Dist]:
    """TTFT, ITL and e2e as the engine's own clock saw them (from each request's arrival),
    as vLLM's histograms would count them; empty without a finished request."""
    done = [r for r in finished if r.token_times_s]
    if not done:
        return {}
    gaps = _gaps_ms(done)
    found = {
        "ttft": summarize([(r.token_times_s[0] - r.arrival_s) * 1000.0 for r in done]),
        "e2e": summarize([(r.token_times_s[-1] - r.arrival_s) * 1000.0 for r in done]),
    }
    if gaps.size:
        found["itl"] = summarize(gaps)
    return found


def _gaps_ms(done: Sequence[SimRequest]) -> npt.NDArray[np.float64]:
    """Every request's gaps between consecutive tokens, in ms: one gap a step (a draft's
    accepted tokens all come at its step's end, no gap between them). In one array pass, not
    a Python loop over the ~10^5 tokens of a load point; ``summarize`` sorts them, so their
    order does not matter."""
    times = np.fromiter(
        itertools.chain.from_iterable(r.token_times_s for r in done), dtype=np.float64
    )
    lengths = np.fromiter((len(r.token_times_s) for r in done), dtype=np.int64, count=len(done))
    steps = np.diff(times)
    keep = steps > 0
    keep[np.cumsum(lengths)[:-1] - 1] = False  # one request's last token to the next's first
    return steps[keep] * 1000.0


def _hit_rate(inside: Sequence[StepRecord]) -> float | None:
    """The prefix cache's hit rate over the window's steps, as vLLM's counters give it
    between two scrapes (the whole point's count read 60% where the window's steady state
    reads the 70% the workload's reuse predicts: a point that begins with sessions under way
    begins with their histories uncached)."""
    asked = sum(s.prefix_queries for s in inside)
    return sum(s.prefix_hits for s in inside) / asked if asked else None


def _external_hit_rate(inside: Sequence[StepRecord]) -> float | None:
    """vLLM's external prefix-cache counters over the window (None: no offloading)."""
    asked = sum(s.external_queries for s in inside)
    return min(1.0, sum(s.external_hits for s in inside) / asked) if asked else None


def _speculation(inside: Sequence[StepRecord], k: int) -> SpecReading | None:
    """vLLM's spec-decode counters over the window's steps (None: no speculation)."""
    if not k:
        return None
    accepted = [n for s in inside for n in s.accepted]
    drafts = len(accepted)
    return SpecReading(
        drafts=float(drafts),
        draft_tokens=float(sum(t for s in inside for t in s.draft_tokens)),
        accepted_tokens=float(sum(accepted)),
        generated_tokens=float(sum(s.generated_tokens for s in inside)),
        accepted_by_position=tuple(
            sum(n > i for n in accepted) / drafts if drafts else 0.0 for i in range(k)
        ),
    )


def _gpu_sample(
    engine: Serving, inside: Sequence[StepRecord], start_s: float, end_s: float
) -> GpuSample:
    """The GPUs' activity, averaged over data-parallel replicas (each its own GPUs)."""
    if not engine.gpu.has_nvml:  # a CPU host or an AMD GPU: no NVML or GPM to read
        return GpuSample(start_s=start_s, end_s=end_s)
    telemetry = GpuTelemetry(engine.gpu, engine.memory, engine.roofline.linear_peak_tflops)
    if engine.replicas == 1:
        return telemetry.sample(inside, start_s, end_s)
    samples = [
        telemetry.sample([s for s in inside if s.engine == index], start_s, end_s)
        for index in range(engine.replicas)
    ]
    averaged = {
        name: sum(values) / len(values)
        for name in _AVERAGED
        if (values := [v for s in samples if (v := getattr(s, name)) is not None])
    }
    return samples[0].model_copy(update=averaged)


_AVERAGED = ("gpu_util_pct", "memory_util_pct", "sm_util_pct", "tensor_util_pct",
             "dram_bw_util_pct", "power_w")  # fmt: skip


def virtual_signals(
    engine: Serving,
    steps: Sequence[StepRecord],
    start_s: float,
    end_s: float,
    finished: Sequence[SimRequest] = (),
) -> Signals:
    """``finished``: the load's finished requests (their server-side e2e latencies)."""
    inside = [s for s in steps if start_s <= s.start_s < end_s]
    span = end_s - start_s
    if not inside or span <= 0:
        return Signals()
    gpu = _gpu_sample(engine, inside, start_s, end_s)
    replicas = engine.replicas
    return Signals(
        kv_usage_mean=_weighted(inside, "kv_usage"),
        kv_usage_max=max(s.kv_usage for s in inside),
        running_mean=_weighted(inside, "running"),
        running_max=float(max(s.running for s in inside)),
        waiting_mean=_weighted(inside, "waiting"),
        preemptions_per_s=sum(s.preempted for s in inside) / span,
        prefix_hit_rate=_hit_rate(inside),
        external_hit_rate=_external_hit_rate(inside),
        tokens_per_step_mean=sum(s.num_tokens for s in inside) / len(inside),
        steps_per_s=len(inside) / span / replicas,  # each engine's, as its gauges are
        prompt_tokens_per_s=sum(s.prompt_tokens for s in inside) / span,
        generation_tokens_per_s=sum(s.generated_tokens for s in inside) / span,
        max_num_seqs=engine.resolved.max_num_seqs,
        num_gpu_blocks=engine.memory.num_blocks,
        block_size=engine.resolved.block_size,
        gpu_util_pct=gpu.gpu_util_pct,
        memory_util_pct=gpu.memory_util_pct,
        sm_util_pct=gpu.sm_util_pct,
        tensor_util_pct=gpu.tensor_util_pct,
        dram_bw_util_pct=gpu.dram_bw_util_pct,
        frontend_cpu_pct=engine.frontend_busy_pct(start_s, end_s),
        server_e2e_sum_s=sum(r.token_times_s[-1] - r.arrival_s for r in finished if r.token_times_s)
        if finished
        else None,
        server_requests=float(len(finished)) if finished else None,
        server_latency=server_latency(finished),
        speculation=_speculation(inside, engine.resolved.speculative_tokens),
        metric_samples=len(inside),
        gpu_samples=1,
    )
