"""The readings a diagnosis weighs, each turned into a share of wall time for a constraint.

Scores approximate how the saturated point's wall time divides between the four constraints,
the way the simulator's ground truth divides it, from what a real deployment can read:

1. Walls in front of the queue take the whole step: a full KV pool or preemptions (cache), a
   running batch pinned at max_num_seqs while KV sits free (scheduling: an admission cap).
2. The rest of the time divides by what the GPU did: idle gaps between steps and kernel-launch
   overhead are scheduling; busy time splits into math (compute) and memory traffic
   (bandwidth), from GPM's tensor and DRAM activity where the GPU has GPM, else from the
   roofline of the step the engine's metrics describe (``kneepoint.policies.diagnosis.gpu_time``).
3. Shapes of latency: when ITL is what fails and its p99 is far above its p50 under mixed
   traffic, long prefills stall decodes: that is scheduling (prefill interference), whatever
   the average step is bound by. Steps filled to the token budget are noted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kneepoint.records import (
    Constraint,
    Evidence,
    LoadPoint,
    SchedulingKind,
    ServerResponse,
    Signals,
    SignalSource,
)

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
        # Half the time from twice the threshold, ramping up to it: at the threshold itself a
        # simulated 14B conversation (0.024 per request, a pool of 4 GiB) read half its time
        # as the cache's where the truth charged it 15%, and bandwidth 78%. Only where the
        # pool runs under pressure or requests queue: a pool 40% full with nothing waiting
        # evicts when a few long prompts meet (a library of 6,144-token documents on an A100,
        # 0.05 per request), and the truth charged the cache 9% of the time, bandwidth 77%.
        pressed = kv >= KV_PRESSURE_FROM or waiting >= WAITING
        floor = 0.5 * min(1.0, per_request / (2 * PREEMPTIONS_PER_REQUEST)) if pressed else 0.0
        churn = _clip(max(floor, per_request / 0.2))
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
