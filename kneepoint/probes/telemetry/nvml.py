"""GPU telemetry through NVML (nvidia-ml-py), sampled in a background thread.

Every GPU a server holds is sampled: a tensor-parallel server's ranks may differ (one rank
throttled shows on its own GPU only). Each sample covers one GPU over one interval: NVML's
coarse utilization, memory, power, SM clock and the active clock-event (throttle) reasons, and
where the GPU has GPM (Hopper and newer) SM, tensor-pipe and DRAM-bandwidth activity between
two GPM samples. With no GPU, no driver or no permission, the sampler yields nothing and
``available`` says why; any field a device does not support stays ``None``. Nothing here
raises into the measurement.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
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


@dataclass
class _Device:
    """One sampled GPU: its NVML index and handle, and its two GPM samples (none without GPM)."""

    index: int
    handle: Any
    gpm: list[Any] = field(default_factory=list)


class NvmlSampler:
    """Samples the GPUs ``indices`` every ``interval_s`` on a daemon thread between ``start``
    and ``stop``: one ``GpuSample`` per GPU per interval."""

    def __init__(
        self, clock: Clock, indices: Sequence[int] = (0,), interval_s: float = 0.5
    ) -> None:
        self.clock, self.interval_s = clock, interval_s
        self.samples: list[GpuSample] = []
        self.available: str | None = None
        """None when sampling works; otherwise why not (no driver, no GPU of ``indices``)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._devices: list[_Device] = []
        try:
            pynvml.nvmlInit()
            self._devices = [_Device(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        except pynvml.NVMLError as exc:  # also raised for a missing library
            self.available = f"NVML unavailable: {exc}"
            self._devices = []
        self._since_us = int(time.time() * 1e6)  # NVML stamps process samples in wall-clock µs

    def start(self) -> None:
        if not self._devices:
            return
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[GpuSample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s * 4 + 5)
        if self._devices:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._devices = []
        return self.samples

    def others(self, own_pids: Collection[int]) -> int | None:
        """Processes outside ``own_pids`` (the measurement's: the server's tree and this one)
        that ran on the GPU since the sampler started: where NVML keeps per-process samples,
        those whose SM use was above zero; else every one with a context on it. None where
        it cannot be told: no NVML, or none of the listed processes is ours, as inside a
        container whose PID namespace NVML's host pids do not belong to."""
        if not self._devices:
            return None
        listed: set[int] = set()
        busy: set[int] | None = set()
        for device in self._devices:
            for call in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                found = _try(getattr(pynvml, call), device.handle) or []
                listed |= {int(p.pid) for p in found}
            sampled = _try(pynvml.nvmlDeviceGetProcessUtilization, device.handle, self._since_us)
            if sampled is None or busy is None:
                busy = None
            else:
                busy |= {int(s.pid) for s in sampled if s.smUtil > 0}
        if not listed & set(own_pids):
            return None
        return len((busy if busy is not None else listed) - set(own_pids))

    def _loop(self) -> None:
        for device in self._devices:
            if getattr(
                _try(pynvml.nvmlGpmQueryDeviceSupport, device.handle), "isSupportedDevice", 0
            ):
                device.gpm = [_try(pynvml.nvmlGpmSampleAlloc) for _ in range(2)]
        try:
            start = self.clock.now()
            for device in self._devices:
                if device.gpm and all(device.gpm):
                    _try(pynvml.nvmlGpmSampleGet, device.handle, device.gpm[0])
            while not self._stop.wait(self.interval_s):
                end = self.clock.now()
                self.samples += [self._sample(start, end, device) for device in self._devices]
                start = end
        except Exception as exc:  # a sampler thread must never take the run down
            log.warning("nvml.sampler_failed", error=repr(exc))
        finally:
            for sample in (s for device in self._devices for s in device.gpm):
                if sample is not None:
                    _try(pynvml.nvmlGpmSampleFree, sample)

    def _sample(self, start: float, end: float, device: _Device) -> GpuSample:
        h = device.handle
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
            "gpu_index": device.index,
        }
        if device.gpm and all(device.gpm):
            fields.update(self._gpm_metrics(device))
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

    @staticmethod
    def _gpm_metrics(device: _Device) -> dict[str, float]:
        """Activity between the previous GPM sample and now; the samples then swap roles."""
        gpm = device.gpm
        if _try(pynvml.nvmlGpmSampleGet, device.handle, gpm[1]) is None:
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
