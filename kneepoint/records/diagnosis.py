"""A bottleneck diagnosis: which constraint binds, how sure, and the evidence for it.

The verdict is one of the four constraints (compute, scheduling, bandwidth, cache), or a reason
no constraint can be named: the server was not loaded (``underloaded``), the client could not
keep its schedule (``client_bound``), or the signals disagree or are missing
(``inconclusive``). Every reading that moved the verdict is kept as an ``Evidence`` line a
person can check against the raw signal.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.drafts import AcceptanceProbe
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig
from kneepoint.records.hardware import GpuSpec, ModelSpec
from kneepoint.records.knobs import CONSTRAINTS, Constraint
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.slo import Slo
from kneepoint.records.workload import Workload

Binding = Literal[
    "compute",
    "scheduling",
    "bandwidth",
    "cache",
    "underloaded",
    "client_bound",
    "host_busy",
    "inconclusive",
]
SchedulingKind = Literal[
    "cpu_overhead", "admission_cap", "prefill_interference", "token_budget", "frontend"
]  # fmt: skip
"""What kind of scheduling wall: CPU-side work the GPU waits for; a sequence cap that keeps
requests waiting while KV is free; long prefills stalling running decodes; a token budget too
small for the batch; an API server whose one event loop is saturated (requests reach the
engine, and tokens the client, late)."""
SignalSource = Literal["gpm", "nvml", "vllm", "roofline", "client", "host"]


NEXT_STEP = {
    "underloaded": "every limit was met with nothing queued; measure at higher rates "
    "(tuning.start_rps) to reach the wall",
    "client_bound": "the load generator fell behind its schedule, so the point measured the "
    "client; give it a core of its own or lower the rate",
    "host_busy": "other work held the host's CPUs (or the GPU) over the point, so it measured "
    "the host; measure again with nothing else running",
    "inconclusive": "the readings split or were too thin to decide; every knob family stays "
    "a candidate, and longer points (tuning.screen_seconds) or GPU readings (NVML) can decide",
}
"""What to do where a verdict names no constraint, by verdict."""


class Evidence(Record):
    """One reading and what it says."""

    signal: str
    """Where it comes from, e.g. ``tensor_util_pct`` or ``kv_usage_mean``."""
    value: float | None
    threshold: str
    """The line it was compared with, e.g. ``>= 60``."""
    reading: str
    """What the comparison means, in words."""
    supports: Constraint | None = None
    """The constraint it points to (None: context, or a reason for no verdict)."""
    weight: float = Field(default=0.0, ge=0.0)
    """How much it added to that constraint's score."""


class Diagnosis(Record):
    """The binding constraint at a saturated load point."""

    binding: Binding
    confidence: float = Field(ge=0.0, le=1.0)
    """Share of the evidence behind the verdict (0 for no verdict)."""
    runner_up: Constraint | None = None
    scheduling_kind: SchedulingKind | None = None
    """Which scheduling wall holds the most time, when scheduling holds any."""
    scores: dict[Constraint, float] = Field(default_factory=dict)
    evidence: tuple[Evidence, ...] = ()
    sources: tuple[SignalSource, ...] = ()
    """Which signal sources were available to it."""
    rate_rps: float | None = None
    """The offered rate of the saturated point it read."""

    @property
    def constraint(self) -> Constraint | None:
        """The binding constraint, or None when the verdict names none."""
        return self.binding if self.binding in CONSTRAINTS else None

    def headline(self) -> str:
        if self.constraint is None:
            # "inconclusive (no constraint named)" left the reader with nothing to do.
            return f"{self.binding} (no constraint named: {NEXT_STEP[self.binding]})"
        kind = ""
        if self.binding == "scheduling" and self.scheduling_kind is not None:
            kind = f" ({self.scheduling_kind.replace('_', ' ')})"
        runner = f"; runner-up {self.runner_up}" if self.runner_up else ""
        return f"{self.binding}{kind}-bound, confidence {self.confidence:.0%}{runner}"


RUNNING_SPREAD = 0.1
"""Least growth in running sequences (log) between two points that reads as a bigger batch:
within 10% is the same batch (the least spread ``observe`` reads a slope over)."""


class ServerResponse(Record):
    """How the server's step time answered a bigger batch, read off two of its own load
    points (vLLM's step rate and tokens per step): the elasticity of step time in tokens per
    step. Near 0, a bigger step costs little more (the weights are read once for all):
    admitting more sequences raises throughput. Near 1 or above, step time grows as fast as
    the batch: the GPU's work, not a cap, sets the throughput."""

    low_rate_rps: float
    high_rate_rps: float
    low_tokens_per_step: float = Field(gt=0.0)
    high_tokens_per_step: float = Field(gt=0.0)
    low_step_ms: float = Field(gt=0.0)
    high_step_ms: float = Field(gt=0.0)
    elasticity: float
    low_running: float | None = None
    high_running: float | None = None
    """Sequences running at each point (None: a reading from before they were kept)."""

    def batch_grew(self) -> bool:
        """Whether more sequences ran in the bigger steps, not only more of each: steps
        that grew by their mix (more of a prompt's prefill a step) at a pinned pool say
        what a token costs, not what a bigger batch does."""
        low, high = self.low_running, self.high_running
        return low is not None and high is not None and math.log(high / low) >= RUNNING_SPREAD

    def batch_gain(self, growth: float) -> float:
        """Throughput ratio when steps carry ``growth`` times the tokens: tokens per second
        scale as growth / growth**elasticity (elasticity taken within 0..1)."""
        return float(growth ** (1.0 - min(1.0, max(0.0, self.elasticity))))

    def reading(self) -> str:
        return (
            f"{self.low_tokens_per_step:.0f} -> {self.high_tokens_per_step:.0f} tokens per "
            f"step took {self.low_step_ms:.1f} -> {self.high_step_ms:.1f} ms "
            f"({self.low_rate_rps:.4g} -> {self.high_rate_rps:.4g} req/s): step time grows "
            f"as tokens^{self.elasticity:.2f}"
        )


class Observation(Record):
    """What a diagnosis reads: a saturated load point (the first rate that failed its SLO),
    optionally the highest rate that met it, the server's measured response between them,
    and what was served on what."""

    saturated: LoadPoint
    below: LoadPoint | None = None
    """The highest rate that met the SLO (at the knee, below the saturated point)."""
    response: ServerResponse | None = None
    gpu: GpuSpec
    model: ModelSpec
    engine: EngineConfig
    workload: Workload | None = None
    efficiency: Efficiency | None = None
    """The roofline's constants for pricing steps (a study's calibration; None: built in)."""
    slo: Slo | None = None
    """The limits the points were judged by: the per-token ones cap what a bigger batch can
    gain (``policies.pruning.ceiling``). None: no cap is read."""
    acceptance: AcceptanceProbe | None = None
    """How n-gram drafts fared on the same traffic, probed where ``engine`` does not
    speculate (``kneepoint.tune.acceptance_step``)."""
