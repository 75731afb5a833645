"""Another process on the GPU voids a point (Step 17, part 1): NVML lists the processes with a
context on the device and, where it keeps them, per-process SM samples. No GPU is lent to CI,
so NVML here is a stand-in answering as the driver does (pids and samples as nvidia-ml-py
returns them); the real check runs with the device tier."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from kneepoint.load.point import load_point
from kneepoint.probes.backends.vllm import _held_gpus
from kneepoint.probes.runtime.clock import Clock
from kneepoint.probes.telemetry.nvml import NvmlSampler
from kneepoint.records import EngineConfig, VllmBackend
from kneepoint.records.loadpoint import Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.records.slo import ClassSlo, Slo

OURS = frozenset({4242, 4243})


def _unsupported(*_: Any) -> Any:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def _driver(
    monkeypatch: pytest.MonkeyPatch, running: list[int], busy: list[tuple[int, int]] | None
) -> None:
    def utilization(_: Any, since_us: int) -> list[SimpleNamespace]:
        assert since_us > 0
        return [SimpleNamespace(pid=pid, smUtil=sm) for pid, sm in busy or []]

    procs = [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in running]
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: object())
    monkeypatch.setattr(pynvml, "nvmlGpmQueryDeviceSupport", _unsupported)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: procs)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGraphicsRunningProcesses", lambda h: [])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetProcessUtilization",
                        utilization if busy is not None else _unsupported)  # fmt: skip


def test_a_process_outside_the_measurement_on_the_gpu_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _driver(monkeypatch, [4242, 9001], busy=None)
    assert NvmlSampler(Clock.start()).others(OURS) == 1


def test_an_idle_process_holding_memory_is_not_where_nvml_keeps_samples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _driver(monkeypatch, [4242, 9001, 9002], busy=[(4242, 90), (9001, 0), (9002, 35)])
    assert NvmlSampler(Clock.start()).others(OURS) == 1


def test_pids_nvml_cannot_match_to_ours_say_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a container NVML's pids are the host's: none is ours, so none can be judged."""
    _driver(monkeypatch, [77001, 77002], busy=None)
    assert NvmlSampler(Clock.start()).others(OURS) is None


def test_a_point_with_another_process_on_the_gpu_is_not_counted() -> None:
    records = [
        RequestRecord(index=i, traffic_class="c", scheduled_s=i * 0.1, sent_s=i * 0.1,
                      chunk_times_s=(i * 0.1 + 0.05,), end_s=i * 0.1 + 0.05,
                      prompt_tokens=8, output_tokens=1)
        for i in range(100)
    ]  # fmt: skip
    slo = Slo(default=ClassSlo(ttft_p99_ms=1000))
    point = load_point(10.0, records, slo, signals=Signals(gpu_other_processes=2))
    assert point.host_busy and not point.valid
    assert point.invalid_reason() == (
        "the host is busy: 2 other processes ran on the GPU over the point; not counted"
    )
    alone = load_point(10.0, records, slo, signals=Signals(gpu_other_processes=0))
    assert not alone.host_busy


def test_every_gpu_of_a_server_is_sampled_and_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor-parallel server's second GPU is read too: its samples carry their index, and a
    process outside the measurement on it voids the point as on the first."""
    _driver(monkeypatch, [], busy=None)
    handles = {3: SimpleNamespace(pids=[4242]), 5: SimpleNamespace(pids=[4243, 9001])}
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: handles[i])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses",
                        lambda h: [SimpleNamespace(pid=p) for p in h.pids])  # fmt: skip
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates",
                        lambda h: SimpleNamespace(gpu=50 + len(h.pids), memory=10))  # fmt: skip
    for call in ("MemoryInfo", "PowerUsage", "ClockInfo", "CurrentClocksEventReasons"):
        monkeypatch.setattr(pynvml, f"nvmlDeviceGet{call}", _unsupported)
    sampler = NvmlSampler(Clock.start(), (3, 5), interval_s=0.01)
    assert sampler.others(OURS) == 1
    sampler.start()
    for _ in range(500):  # the sampler thread's first two intervals
        if len(sampler.samples) >= 4:
            break
        threading.Event().wait(0.01)
    samples = sampler.stop()
    by_gpu = {s.gpu_index: s.gpu_util_pct for s in samples}
    assert by_gpu == {3: 51, 5: 52}
    assert [s.gpu_index for s in samples[:2]] == [3, 5]


def test_a_server_samples_the_gpus_it_holds() -> None:
    spec = VllmBackend()
    held = _held_gpus(spec)
    assert held(EngineConfig(model="m", tensor_parallel_size=2)) == (0, 1)
    assert _held_gpus(spec.on_gpus(("4", "5")))(EngineConfig(model="m")) == (4, 5)
