"""GPU time as a diagnosis reads it: how the time no queue wall holds divides between idle or
kernel-launch gaps (scheduling), math (compute) and memory traffic (bandwidth).

NVML's coarse utilisation says how much of the time the GPU was busy at all, not on what; GPM's
tensor and DRAM activity split the busy time where the GPU has GPM, else the roofline of the
step the engine's metrics describe does (``kneepoint.policies.diagnosis.step_estimate``).
"""

from __future__ import annotations

from kneepoint.policies.diagnosis.evidence import Tally, queued
from kneepoint.policies.diagnosis.frontend import FRONTEND_SATURATED_PCT
from kneepoint.policies.diagnosis.step_estimate import StepEstimate
from kneepoint.records import LoadPoint, Signals

# What real kernels reach of the peaks (public vLLM-on-H100 models): tensor activity near half
# of peak already means GEMM-bound; streaming weights and KV reaches ~70% of peak bandwidth.
TYPICAL_MFU = 0.5
TYPICAL_BANDWIDTH_EFFICIENCY = 0.7


def gpu_time(point: LoadPoint, estimate: StepEstimate | None, rest: float, tally: Tally) -> None:
    """Divide the time not held by a queue wall between idle/launch, math and memory."""
    s = point.signals
    busy, launch = _busy(s, estimate, queued(point), tally)
    if busy is None:
        return
    idle = (1.0 - busy) + launch
    if queued(point) or (s.running_mean or 0.0) > 0:
        frontend = _frontend_saturated(s, tally)
        tally.add(
            "scheduling",
            rest * idle,
            signal="gpu_idle_or_launch_share",
            value=round(idle, 3),
            threshold="share of the time",
            reading=f"the {tally.device} idled or launched kernels {idle:.0%} of the time while "
            "work was in flight: "
            + (
                "the saturated API server hands requests in and streams tokens out late"
                if frontend
                else "CPU-side scheduling, output processing and launch overhead are exposed"
            ),
            kind="frontend" if frontend else "cpu_overhead",
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


def _frontend_saturated(s: Signals, tally: Tally) -> bool:
    """Whether the busiest API-server process had no time left (and the line saying so)."""
    pct = s.frontend_cpu_pct
    if pct is None:
        return False
    saturated = pct >= FRONTEND_SATURATED_PCT
    tally.add(
        None,
        0.0,
        signal="frontend_cpu_pct",
        value=round(pct, 1),
        threshold=f">= {FRONTEND_SATURATED_PCT:g} is a saturated event loop",
        reading=f"the busiest API-server process used {pct:.0f}% of a core: "
        + ("its one event loop is saturated" if saturated else "it had time to spare"),
    )
    return saturated


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
        reading=roofline_reading(estimate, tally.device),
    )
    return busy, launch


def roofline_reading(estimate: StepEstimate, device: str = "GPU") -> str:
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
