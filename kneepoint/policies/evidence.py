"""The readings a diagnosis weighs, each turned into a share of wall time for a constraint.

Scores approximate how the saturated point's wall time divides between the four constraints,
the way the simulator's ground truth divides it, from what a real deployment can read:

1. Walls in front of the queue take the whole step: a full KV pool or preemptions (cache), a
   running batch pinned at max_num_seqs while KV sits free (scheduling: an admission cap).
2. The rest of the time divides by what the GPU did: idle gaps between steps and kernel-launch
   overhead are scheduling; busy time splits into math (compute) and memory traffic
   (bandwidth), from GPM's tensor and DRAM activity where the GPU has GPM, else from the
   roofline of the step the engine's metrics describe. NVML's coarse utilisation says how
   much of the time the GPU was busy at all, but not on what.
3. Shapes of latency: when ITL is what fails and its p99 is far above its p50 under mixed
   traffic, long prefills stall decodes: that is scheduling (prefill interference), whatever
   the average step is bound by. Steps filled to the token budget are noted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kneepoint.policies.step_estimate import StepEstimate
from kneepoint.records.diagnosis import Evidence, SchedulingKind, ServerResponse, SignalSource
from kneepoint.records.knobs import Constraint
from kneepoint.records.loadpoint import LoadPoint, Signals

# KV usage from which the pool, not the GPU, limits the batch (vLLM admits a request only
# when all of its blocks fit, so a pool 90% full already turns requests away).
KV_FULL = 0.9
KV_PRESSURE_FROM = 0.7
# Preemptions per completed request from which eviction churn is the story.
PREEMPTIONS_PER_REQUEST = 0.02
# Running sequences at this share of max_num_seqs, with requests waiting, is a pinned cap.
CAP_PINNED_FROM = 0.8
CAP_PINNED_FULL = 0.95
WAITING = 1.0
# A pinned cap binds only where a bigger batch buys throughput, which the server's own points
# say (its step time against tokens per step, ``ServerResponse``). Up to this elasticity a
# bigger step costs far less than it carries: the cap holds its whole share; at 1 step time
# grows as fast as the batch and none. The simulated admission-cap scenarios of
# benchmarks/diagnosis_accuracy.py (seed 0) read 0.11-0.26, its CPU-bound ones 0.55-0.59; the
# real H100 recordings, queueing past their knee with the cap 90% full, read 1.0-1.2
# (tests/fixtures/real), where a 4x cap measured +1.3%.
CAP_RELIEF_FROM = 0.5
# What real kernels reach of the peaks (public vLLM-on-H100 models): tensor activity near half
# of peak already means GEMM-bound; streaming weights and KV reaches ~70% of peak bandwidth.
TYPICAL_MFU = 0.5
TYPICAL_BANDWIDTH_EFFICIENCY = 0.7
# An ITL p99 this many times its p50 means some steps stall the decodes (long prefills).
ITL_TAIL_RATIO = 4.0
# When ITL fails with such a tail, the stalls, not the average step, break the SLO: the chunk
# knobs are the fix, so the stalls take most of the time no queue wall holds.
INTERFERENCE_SHARE = 0.6
BUDGET_FILLED = 0.9


@dataclass
class Tally:
    """Scores, evidence and scheduling kinds gathered so far."""

    scores: dict[Constraint, float] = field(
        default_factory=lambda: dict.fromkeys(("compute", "scheduling", "bandwidth", "cache"), 0.0)
    )
    evidence: list[Evidence] = field(default_factory=list)
    kinds: dict[SchedulingKind, float] = field(default_factory=dict)
    sources: set[SignalSource] = field(default_factory=set)
    device: str = "GPU"
    """What the readings call the device (``GpuSpec.kind``: GPU, or CPU for vLLM's CPU
    build, whose memory is the host's RAM rather than HBM)."""

    @property
    def memory(self) -> str:
        return "memory" if self.device == "CPU" else "HBM"

    def add(
        self,
        constraint: Constraint | None,
        weight: float,
        *,
        signal: str,
        value: float | None,
        threshold: str,
        reading: str,
        kind: SchedulingKind | None = None,
    ) -> None:
        weight = max(0.0, weight)
        if constraint is not None:
            self.scores[constraint] += weight
        if kind is not None:
            self.kinds[kind] = self.kinds.get(kind, 0.0) + weight
        self.evidence.append(
            Evidence(
                signal=signal,
                value=value,
                threshold=threshold,
                reading=reading,
                supports=constraint,
                weight=round(weight, 4),
            )
        )


def queued(point: LoadPoint) -> bool:
    """Requests waited in front of the engine, so it stepped back to back."""
    return (point.signals.waiting_mean or 0.0) >= WAITING


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def cache_share(point: LoadPoint, tally: Tally) -> float:
    """Share of the time the KV pool held the queue back."""
    s = point.signals
    if s.kv_usage_mean is None and s.preemptions_per_s is None:
        return 0.0
    tally.sources.add("vllm")
    waiting = s.waiting_mean or 0.0
    kv = s.kv_usage_mean or 0.0
    pressure = _clip((kv - KV_PRESSURE_FROM) / (1.0 - KV_PRESSURE_FROM - 0.05))
    share = pressure if waiting >= WAITING else pressure / 2
    if s.kv_usage_mean is not None:
        state = "new sequences wait for blocks" if kv >= KV_FULL else "room left for more"
        tally.add(
            "cache",
            share,
            signal="kv_usage_mean",
            value=round(kv, 3),
            threshold=f">= {KV_FULL}",
            reading=f"KV cache {kv:.0%} full on average, {waiting:.1f} waiting: {state}",
        )
    per_request = preemptions_per_request(point)
    if s.preemptions_per_s is not None and per_request >= PREEMPTIONS_PER_REQUEST:
        churn = _clip(max(0.5, per_request / 0.2))
        tally.add(
            "cache",
            max(0.0, churn - share),
            signal="preemptions_per_s",
            value=round(s.preemptions_per_s, 3),
            threshold=f">= {PREEMPTIONS_PER_REQUEST} per completed request",
            reading=f"{s.preemptions_per_s:.1f} preemptions/s ({per_request:.2f} per completed"
            " request): running sequences are evicted and recomputed for want of blocks",
        )
        share = max(share, churn)
    return share


def admission_cap_share(
    point: LoadPoint, max_num_seqs: int, response: ServerResponse | None, tally: Tally
) -> float:
    """Share of the time the running cap, not memory, kept waiting requests out, where the
    server's measured response says admitting more would have raised its throughput."""
    s = point.signals
    if s.running_mean is None:
        return 0.0
    cap = s.max_num_seqs or max_num_seqs
    pinned = s.running_mean / cap
    waiting, kv = s.waiting_mean or 0.0, s.kv_usage_mean or 0.0
    if kv >= KV_FULL or not cap_pinned(s, cap):
        return 0.0
    pinned_share = _clip((pinned - CAP_PINNED_FROM) / (CAP_PINNED_FULL - CAP_PINNED_FROM))
    relief = 1.0 if response is None else cap_relief(response)
    share = pinned_share * relief
    tally.add(
        "scheduling",
        share,
        signal="running_mean",
        value=round(s.running_mean, 2),
        threshold=f">= {CAP_PINNED_FROM:.0%} of max_num_seqs ({cap})",
        reading=f"running {s.running_mean:.1f} of max_num_seqs {cap} with {waiting:.1f} "
        f"waiting and KV {kv:.0%} used: the sequence cap, not memory, keeps requests waiting",
        kind="admission_cap",
    )
    if response is not None:
        verdict = (
            "a bigger batch buys throughput: the cap binds"
            if relief >= 1.0
            else f"twice the batch would serve {response.batch_gain(2.0):.2f}x the tokens "
            "per second: the cap is full because the server is overloaded"
            + ("" if relief > 0 else ", not what limits it")
        )
        tally.add(
            None,
            0.0,
            signal="step_time_elasticity",
            value=response.elasticity,
            threshold=f"<= {CAP_RELIEF_FROM} for a full cap to bind",
            reading=f"the server's own points: {response.reading()}; {verdict}",
        )
    return share


def preemptions_per_request(point: LoadPoint) -> float:
    """Preemptions per completed request at a point."""
    return (point.signals.preemptions_per_s or 0.0) / max(point.achieved_rps, 1e-9)


def cap_pinned(s: Signals, cap: int) -> bool:
    """Running at the sequence cap (its pinned share or more) with requests waiting."""
    running, waiting = s.running_mean or 0.0, s.waiting_mean or 0.0
    return running >= CAP_PINNED_FROM * cap and waiting >= WAITING


def cap_relief(response: ServerResponse) -> float:
    """Share of a pinned cap's hold that is real, by how much throughput a bigger batch buys."""
    return _clip((1.0 - response.elasticity) / (1.0 - CAP_RELIEF_FROM))


def gpu_time(point: LoadPoint, estimate: StepEstimate | None, rest: float, tally: Tally) -> None:
    """Divide the time not held by a queue wall between idle/launch, math and memory."""
    s = point.signals
    busy, launch = _busy(s, estimate, queued(point), tally)
    if busy is None:
        return
    idle = (1.0 - busy) + launch
    if queued(point) or (s.running_mean or 0.0) > 0:
        tally.add(
            "scheduling",
            rest * idle,
            signal="gpu_idle_or_launch_share",
            value=round(idle, 3),
            threshold="share of the time",
            reading=f"the {tally.device} idled or launched kernels {idle:.0%} of the time while "
            "work was in flight: CPU-side scheduling, output processing and launch overhead "
            "are exposed",
            kind="cpu_overhead",
        )
    math_share = _compute_share(s, estimate, tally)
    working = rest * max(0.0, busy - launch)
    if math_share is None:
        tally.add(
            None,
            0.0,
            signal="compute_vs_bandwidth",
            value=None,
            threshold="GPM counters or a roofline estimate",
            reading=f"the {tally.device} was busy, but nothing available splits math from "
            "memory traffic",
        )
        return
    tally.add(
        "compute",
        working * math_share,
        signal="math_share_of_busy_time",
        value=round(math_share, 3),
        threshold="> 0.5",
        reading=f"{math_share:.0%} of the busy {tally.device} time is math",
    )
    tally.add(
        "bandwidth",
        working * (1 - math_share),
        signal="memory_share_of_busy_time",
        value=round(1 - math_share, 3),
        threshold="> 0.5",
        reading=f"{1 - math_share:.0%} of the busy {tally.device} time waits on "
        f"{tally.memory} reads (weights, KV)",
    )


def _busy(
    s: Signals, estimate: StepEstimate | None, saturated: bool, tally: Tally
) -> tuple[float | None, float]:
    """(share of its working time the GPU ran kernels, share that was launch overhead).

    NVML's utilisation counts every idle moment, so it is the GPU's busy share only while a
    queue kept the engine stepping; otherwise the roofline's share of each observed step is."""
    launch = estimate.launch_fraction if estimate is not None else 0.0
    if s.gpu_util_pct is not None and not saturated and estimate is not None:
        tally.add(
            None,
            0.0,
            signal="gpu_util_pct",
            value=s.gpu_util_pct,
            threshold="read per step when nothing queues",
            reading=f"NVML: a kernel ran {s.gpu_util_pct:.0f}% of the time, but with nothing "
            "queued the GPU also idles between requests; the step itself is what is slow",
        )
    elif s.gpu_util_pct is not None:
        tally.sources.add("nvml")
        tally.add(
            None,
            0.0,
            signal="gpu_util_pct",
            value=s.gpu_util_pct,
            threshold="< 90 means idle gaps",
            reading=f"NVML: a kernel ran {s.gpu_util_pct:.0f}% of the time (it cannot say "
            "which units were busy)",
        )
        return s.gpu_util_pct / 100.0, min(launch, s.gpu_util_pct / 100.0)
    if estimate is None:
        return None, 0.0
    tally.sources.add("roofline")
    busy = estimate.busy_fraction
    tally.add(
        None,
        0.0,
        signal="roofline_busy_fraction",
        value=round(busy, 3),
        threshold="< 0.9 means idle gaps",
        reading=_roofline_reading(estimate, tally.device),
    )
    return busy, launch


def _roofline_reading(estimate: StepEstimate, device: str = "GPU") -> str:
    gpu_ms, step_ms = estimate.gpu_s * 1e3, estimate.observed_step_s * 1e3
    if gpu_ms > step_ms:
        # The model's efficiencies are below this GPU's: the estimate cannot exceed the step
        # the engine actually ran, so it is read as no idle time at all.
        return (
            f"the roofline estimates {gpu_ms:.2f} ms of {device} work for a step measured at "
            f"{step_ms:.2f} ms (it underrates this {device} by {gpu_ms / step_ms - 1:.0%}): "
            "no idle time between steps"
        )
    return (
        f"of each {step_ms:.2f} ms step the roofline accounts for {gpu_ms:.2f} ms of {device} "
        f"work ({gpu_ms / step_ms:.0%}); the rest is idle or CPU-side time"
    )


def _compute_share(s: Signals, estimate: StepEstimate | None, tally: Tally) -> float | None:
    """Share of busy time that is math: GPM where the GPU has it, else the roofline."""
    tensor, dram = s.tensor_util_pct, s.dram_bw_util_pct
    if tensor is not None and dram is not None:
        tally.sources.add("gpm")
        tally.add(
            None,
            0.0,
            signal="tensor_util_pct",
            value=round(tensor, 2),
            threshold=f"~{100 * TYPICAL_MFU:.0f} is GEMM-bound",
            reading=f"GPM: tensor cores at {tensor:.0f}% of peak",
        )
        tally.add(
            None,
            0.0,
            signal="dram_bw_util_pct",
            value=round(dram, 2),
            threshold=f"~{100 * TYPICAL_BANDWIDTH_EFFICIENCY:.0f} is bandwidth-bound",
            reading=f"GPM: HBM bandwidth at {dram:.0f}% of peak",
        )
        # Readings as shares of what real kernels reach, combined as the roofline combines
        # compute and memory time (a smooth maximum), give the math share of the busy time.
        compute = (tensor / (100.0 * TYPICAL_MFU)) ** 4
        memory = (dram / (100.0 * TYPICAL_BANDWIDTH_EFFICIENCY)) ** 4
        return compute / (compute + memory) if compute + memory > 0 else None
    if estimate is None:
        return None
    tally.sources.add("roofline")
    tally.add(
        None,
        0.0,
        signal="roofline_compute_share",
        value=round(estimate.compute_share, 3),
        threshold="> 0.5 is math-bound",
        reading=f"the roofline of the observed step ({estimate.context_tokens:.0f}-token "
        f"contexts) is {estimate.compute_share:.0%} math",
    )
    return estimate.compute_share


def interference_share(point: LoadPoint, rest: float, tally: Tally) -> float:
    """Share of the unheld time owed to prefill chunks stalling decodes, when ITL is what fails
    and its tail is long: then the failing latency comes from stalls, not from raw speed."""
    failing = {v.split(" ", 1)[0] for v in point.violations if " itl_" in v}
    for name, dists in sorted(point.dists.items()):
        itl = dists.get("itl")
        if name not in failing or itl is None or not 0 < itl.p50_ms < itl.p99_ms < math.inf:
            continue
        ratio = itl.p99_ms / itl.p50_ms
        if ratio >= ITL_TAIL_RATIO:
            share = INTERFERENCE_SHARE * rest
            tally.add(
                "scheduling",
                share,
                signal=f"{name}.itl_p99_over_p50",
                value=round(ratio, 2),
                threshold=f">= {ITL_TAIL_RATIO:g} while ITL fails",
                reading=f"{name}: ITL p99 {itl.p99_ms:.0f} ms is {ratio:.1f}x its p50 "
                f"{itl.p50_ms:.0f} ms: long prefill chunks stall running decodes",
                kind="prefill_interference",
            )
            return share
    return 0.0


def token_budget(point: LoadPoint, budget_tokens: int, tally: Tally) -> None:
    """Steps filled to the token budget (context for the budget knob)."""
    tokens = point.signals.tokens_per_step_mean
    if tokens is not None and tokens >= BUDGET_FILLED * budget_tokens:
        tally.add(
            None,
            0.0,
            signal="tokens_per_step_mean",
            value=round(tokens, 1),
            threshold=f">= {BUDGET_FILLED:.0%} of max_num_batched_tokens ({budget_tokens})",
            reading="steps run full to the token budget: every prefill is chunked at it",
        )
