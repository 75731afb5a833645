"""GPU telemetry through NVML (nvidia-ml-py), sampled in a background thread.

Each sample covers one interval: NVML's coarse utilization, memory, power, SM clock and the
active clock-event (throttle) reasons, and where the GPU has GPM (Hopper and newer) SM,
tensor-pipe and DRAM-bandwidth activity between two GPM samples. With no GPU, no driver or
no permission, the sampler yields nothing and ``available`` says why; any field a device does
not support stays ``None``. Nothing here raises into the measurement.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Collection
from typing import Any

import pynvml
import structlog

from kneepoint.probes.runtime import Clock
from kneepoint.records import GpuSample

log = structlog.get_logger(__name__)

_REASONS = {
    "gpu_idle": "nvmlClocksEventReasonGpuIdle",
    "applications_clocks_setting": "nvmlClocksEventReasonApplicationsClocksSetting",
    "sw_power_cap": "nvmlClocksEventReasonSwPowerCap",
    "hw_slowdown": "nvmlClocksEventReasonHwSlowdown",
    "sync_boost": "nvmlClocksEventReasonSyncBoost",
    "sw_thermal_slowdown": "nvmlClocksEventReasonSwThermalSlowdown",
    "hw_thermal_slowdown": "nvmlClocksEventReasonHwThermalSlowdown",
    "hw_power_brake_slowdown": "nvmlClocksEventReasonHwPowerBrakeSlowdown",
}
_GPM = {
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}


def _try(call: Any, *args: Any) -> Any:
    """One NVML call; None where the device or driver does not support it."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


class NvmlSampler:
    """Samples one GPU every ``interval_s`` on a daemon thread between ``start`` and ``stop``."""

    def __init__(self, clock: Clock, index: int = 0, interval_s: float = 0.5) -> None:
        self.clock, self.index, self.interval_s = clock, index, interval_s
        self.samples: list[GpuSample] = []
        self.available: str | None = None
        """None when sampling works; otherwise why not (no driver, no GPU ``index``)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:  # also raised for a missing library
            self.available = f"NVML unavailable: {exc}"
            self._handle = None
        self._since_us = int(time.time() * 1e6)  # NVML stamps process samples in wall-clock µs
        self._gpm = self._handle is not None and bool(
            getattr(_try(pynvml.nvmlGpmQueryDeviceSupport, self._handle), "isSupportedDevice", 0)
        )

    def start(self) -> None:
        if self._handle is None:
            return
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[GpuSample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s * 4 + 5)
        if self._handle is not None:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._handle = None
        return self.samples

    def others(self, own_pids: Collection[int]) -> int | None:
        """Processes outside ``own_pids`` (the measurement's: the server's tree and this one)
        that ran on the GPU since the sampler started: where NVML keeps per-process samples,
        those whose SM use was above zero; else every one with a context on it. None where
        it cannot be told: no NVML, or none of the listed processes is ours, as inside a
        container whose PID namespace NVML's host pids do not belong to."""
        if self._handle is None:
            return None
        listed: set[int] = set()
        for call in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            found = _try(getattr(pynvml, call), self._handle) or []
            listed |= {int(p.pid) for p in found}
        if not listed & set(own_pids):
            return None
        busy = _try(pynvml.nvmlDeviceGetProcessUtilization, self._handle, self._since_us)
        if busy is not None:
            listed = {int(s.pid) for s in busy if s.smUtil > 0}
        return len(listed - set(own_pids))

    def _loop(self) -> None:
        gpm = [_try(pynvml.nvmlGpmSampleAlloc) for _ in range(2)] if self._gpm else []
        try:
            start = self.clock.now()
            if gpm and all(gpm):
                _try(pynvml.nvmlGpmSampleGet, self._handle, gpm[0])
            while not self._stop.wait(self.interval_s):
                end = self.clock.now()
                self.samples.append(self._sample(start, end, gpm))
                start = end
        except Exception as exc:  # a sampler thread must never take the run down
            log.warning("nvml.sampler_failed", error=repr(exc))
        finally:
            for sample in gpm:
                if sample is not None:
                    _try(pynvml.nvmlGpmSampleFree, sample)

    def _sample(self, start: float, end: float, gpm: list[Any]) -> GpuSample:
        h = self._handle
        util = _try(pynvml.nvmlDeviceGetUtilizationRates, h)
        memory = _try(pynvml.nvmlDeviceGetMemoryInfo, h)
        power = _try(pynvml.nvmlDeviceGetPowerUsage, h)
        clock = _try(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
        fields: dict[str, Any] = {
            "start_s": start,
            "end_s": end,
            "gpu_util_pct": util.gpu if util is not None else None,
            "memory_util_pct": util.memory if util is not None else None,
            "memory_used_mib": memory.used / 2**20 if memory is not None else None,
            "memory_total_mib": memory.total / 2**20 if memory is not None else None,
            "power_w": power / 1000.0 if power is not None else None,
            "sm_clock_mhz": float(clock) if clock is not None else None,
            "throttle_reasons": self._reasons(h),
        }
        if gpm and all(gpm):
            fields.update(self._gpm_metrics(gpm))
        return GpuSample(**fields)

    @staticmethod
    def _reasons(h: Any) -> tuple[str, ...] | None:
        getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        mask = _try(getter, h) if getter is not None else None
        if mask is None:
            return None
        return tuple(
            name for name, const in _REASONS.items() if mask & int(getattr(pynvml, const, 0))
        )

    def _gpm_metrics(self, gpm: list[Any]) -> dict[str, float]:
        """Activity between the previous GPM sample and now; the samples then swap roles."""
        if _try(pynvml.nvmlGpmSampleGet, self._handle, gpm[1]) is None:
            return {}
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.sample1, request.sample2 = gpm[0], gpm[1]
        request.numMetrics = len(_GPM)
        for i, const in enumerate(_GPM.values()):
            request.metrics[i].metricId = getattr(pynvml, const)
        result = _try(pynvml.nvmlGpmMetricsGet, request)
        gpm[0], gpm[1] = gpm[1], gpm[0]
        if result is None:
            return {}
        return {
            field: min(100.0, max(0.0, float(request.metrics[i].value)))
            for i, field in enumerate(_GPM)
        }


def gpu_count() -> int:
    """The GPUs NVML sees on this machine (0 where there is no NVIDIA driver)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()
