"""Ground truth: which of the four constraints each step's wall time belongs to.

Only tests and benchmarks read this; the agent must infer the same from the signals a real
engine exposes. A step in which waiting requests could not be admitted is charged whole to
what stopped them: KV blocks (or a preemption) to ``cache``, the sequence cap with KV room to
``scheduling``. A step whose output waited longer than the step behind output the API server
was still streaming is charged whole to ``scheduling`` too: its tokens reach the client at the
API server's pace, not the engine's (``kneepoint.sim.frontend``; the CPU-side serving work
that the diagnosis names a saturated front-end, and ``--api-server-count`` relieves).
Otherwise the step is split by what its time was spent on: CPU time the GPU waited for and
kernel-launch overhead to ``scheduling``, the roofline part to ``compute`` and ``bandwidth`` by
the compute share, and tensor-parallel all-reduces and MoE gathers to ``bandwidth``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneepoint.physics import StepCost
from kneepoint.sim.step_plan import AdmissionStop

# From this KV usage on, the pool is what limits the batch.
_KV_ROOM = 0.9


@dataclass(frozen=True, slots=True)
class Attribution:
    """Seconds of one step (or a sum of steps) charged to each constraint."""

    compute_s: float = 0.0
    scheduling_s: float = 0.0
    bandwidth_s: float = 0.0
    cache_s: float = 0.0

    def __add__(self, other: Attribution) -> Attribution:
        return Attribution(
            self.compute_s + other.compute_s,
            self.scheduling_s + other.scheduling_s,
            self.bandwidth_s + other.bandwidth_s,
            self.cache_s + other.cache_s,
        )

    @property
    def total_s(self) -> float:
        return self.compute_s + self.scheduling_s + self.bandwidth_s + self.cache_s

    def shares(self) -> dict[str, float]:
        total = self.total_s or 1.0
        return {
            "compute": self.compute_s / total,
            "scheduling": self.scheduling_s / total,
            "bandwidth": self.bandwidth_s / total,
            "cache": self.cache_s / total,
        }

    def dominant(self) -> tuple[str, float]:
        """The constraint with the largest share, and that share."""
        return max(self.shares().items(), key=lambda item: item[1])


def attribute(
    cost: StepCost, stop: AdmissionStop, kv_usage: float, frontend_held: bool = False
) -> Attribution:
    """Charge one step's wall time to the constraints."""
    wall = cost.wall_s
    if stop in ("kv_capacity", "preempted") or kv_usage >= _KV_ROOM:
        return Attribution(cache_s=wall)
    if stop == "max_num_seqs" or frontend_held:
        return Attribution(scheduling_s=wall)
    cpu_exposed = wall - cost.gpu_s
    roofline = cost.gpu_roofline_s
    return Attribution(
        compute_s=roofline * cost.compute_share,
        scheduling_s=cpu_exposed + cost.launch_s,
        bandwidth_s=roofline * (1.0 - cost.compute_share) + cost.allreduce_s,
    )
