"""Describe the host a run measures from: its CPU model, cores and the instruction sets that
set vLLM's CPU build's speed, and its GPUs through NVML. Nothing here raises."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pynvml

from kneepoint.records import HostInfo

CPUINFO = Path("/proc/cpuinfo")
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")
"""The flags vLLM's CPU build dispatches on (its _C_AVX512 and _C_AVX2 kernels, oneDNN's AMX
paths), in the order the report names them."""


def describe_host(cpuinfo: Path = CPUINFO) -> HostInfo:
    model, flags = _cpu(cpuinfo)
    names, driver = _gpus()
    return HostInfo(
        cpu_model=model,
        cpu_cores=max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count() or 1),
        isa=tuple(flag for flag in ISA_FLAGS if flag in flags),
        gpus=names,
        gpu_driver=driver,
    )  # fmt: skip


def _cpu(cpuinfo: Path) -> tuple[str | None, set[str]]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None, set()
    model: str | None = None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = " ".join(value.split()) or None
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def _gpus() -> tuple[tuple[str, ...], str | None]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return (), None
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        driver = pynvml.nvmlSystemGetDriverVersion()
        return tuple(names), driver.decode() if isinstance(driver, bytes) else str(driver)
    except pynvml.NVMLError:
        return (), None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
