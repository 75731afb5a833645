"""GPU counters derived from the simulated steps, the way NVML and GPM would see them.

Each step occupies ``[start, start + wall]``; its GPU work (``gpu_s``) is busy time, its FLOPs
and bytes are spread over that busy time. A window's counters are the overlap-weighted sums:
NVML's coarse "GPU util" counts any kernel as busy (so a memory-bound decode reads 100%), while
GPM splits SM, tensor and DRAM activity. Readings carry multiplicative noise and NVML's
whole-percent rounding; GPM readings exist only for GPUs that have GPM.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kneepoint.physics import MemoryPlan
from kneepoint.records import MIB, GpuSample, GpuSpec
from kneepoint.sim.engine import StepRecord

# Memory-bound kernels still keep warps resident while they wait on loads.
_SM_WHILE_MEMORY_BOUND = 0.45
_SM_WHILE_LAUNCHING = 0.1
_NOISE = 0.03


def _clip(value: float) -> float:
    return min(100.0, max(0.0, value))


class GpuTelemetry:
    """Turns steps into NVML/GPM-style samples for one simulated GPU."""

    def __init__(self, gpu: GpuSpec, memory: MemoryPlan, peak_tflops: float, seed: int = 0):
        self.gpu = gpu
        self._rng = random.Random(f"telemetry:{seed}")
        self._peak_flops = peak_tflops * 1e12
        self._peak_bytes_s = gpu.hbm_tb_s * 1e12
        # vLLM reserves all of this at start-up; it does not move with load.
        self._used_mib = (
            memory.weight_bytes + memory.activation_bytes + memory.overhead_bytes + memory.kv_bytes
        ) / MIB

    def sample(self, steps: Iterable[StepRecord], start_s: float, end_s: float) -> GpuSample:
        """Counters over ``[start_s, end_s)`` from the steps that overlap it."""
        window = end_s - start_s
        if window <= 0:
            raise ValueError("a telemetry window needs end_s > start_s")
        busy = sm = memory = flops = 0.0
        for step in steps:
            wall = step.cost.wall_s
            overlap = min(end_s, step.start_s + wall) - max(start_s, step.start_s)
            if overlap <= 0 or wall <= 0:
                continue
            share = overlap / wall
            cost = step.cost
            busy += cost.gpu_s * share
            roofline = cost.gpu_roofline_s * share
            sm_fraction = cost.compute_share + (1 - cost.compute_share) * _SM_WHILE_MEMORY_BOUND
            sm += roofline * sm_fraction + cost.launch_s * share * _SM_WHILE_LAUNCHING
            memory += cost.bytes_read / self._peak_bytes_s * share
            flops += cost.flops * share
        gpm = self.gpu.has_gpm
        return GpuSample(
            start_s=start_s,
            end_s=end_s,
            gpu_util_pct=round(self._noisy(busy / window)),
            # NVML counts a memory controller that is busy at all; it reads high whenever
            # the GPU moves data, well above the achieved bandwidth share.
            memory_util_pct=round(self._noisy(min(busy, 2.0 * memory) / window)),
            sm_util_pct=self._noisy(sm / window) if gpm else None,
            tensor_util_pct=self._noisy(flops / self._peak_flops / window) if gpm else None,
            dram_bw_util_pct=self._noisy(memory / window) if gpm else None,
            memory_used_mib=self._used_mib,
            memory_total_mib=float(self.gpu.memory_mib),
        )

    def _noisy(self, fraction: float) -> float:
        return _clip(100.0 * fraction * (1.0 + self._rng.gauss(0.0, _NOISE)))
