"""GPU telemetry samples as NVML (and, on Hopper and newer, GPM) would report them."""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import Record

_Pct = Field(default=None, ge=0.0, le=100.0)


class GpuSample(Record):
    """One GPU's activity over a window; ``None`` where the source cannot tell."""

    start_s: float
    end_s: float
    gpu_util_pct: float | None = _Pct
    """NVML utilization.gpu: share of the window in which any kernel ran (coarse)."""
    memory_util_pct: float | None = _Pct
    """NVML utilization.memory: share of the window in which memory was read or written."""
    sm_util_pct: float | None = _Pct
    """GPM SM utilisation: SMs with a resident warp, averaged over SMs and time."""
    tensor_util_pct: float | None = _Pct
    """GPM any-tensor-pipe activity: achieved share of the tensor-core peak."""
    dram_bw_util_pct: float | None = _Pct
    """GPM DRAM bandwidth: achieved share of peak HBM bandwidth."""
    memory_used_mib: float | None = Field(default=None, ge=0.0)
    memory_total_mib: float | None = Field(default=None, ge=0.0)
    power_w: float | None = Field(default=None, ge=0.0)
    sm_clock_mhz: float | None = Field(default=None, ge=0.0)
    throttle_reasons: tuple[str, ...] | None = None
    """Active clock-event (throttle) reasons by NVML name, e.g. ``sw_thermal_slowdown``."""
    gpu_index: int | None = None
    """The NVML index of the GPU sampled, one of a multi-GPU server's (None: the server's own
    telemetry, as the simulator's)."""
