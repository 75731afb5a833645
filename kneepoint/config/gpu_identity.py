"""Which catalogue GPU a device NVML names is, and whether a study prices the GPUs it measures.

A study names its GPU (``gpu: h100-sxm``) and every prediction (memory plan, roofline, the
rules' prices) uses that entry's peaks; the host's GPUs are what NVML reports at the run's
start (``HostInfo.gpus``). A study that names another part than the one it runs on prices
every move for the wrong device, so the run and its report say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kneepoint.config.catalog import gpu_catalogue
from kneepoint.records import GpuSpec, HostInfo, StudySpec


def identify_gpu(reported: str, gpus: Mapping[str, GpuSpec] | None = None) -> GpuSpec | None:
    """The catalogue GPU an NVML device name names: the one whose NVML name it holds longest
    (``NVIDIA GB200`` is the GB200, though it holds the B200's ``B200`` too); None where no
    catalogue GPU's name is in it."""
    catalogue = gpu_catalogue() if gpus is None else gpus
    best = max(catalogue.values(), key=lambda g: g.nvml_match(reported), default=None)
    return best if best is not None and best.nvml_match(reported) > 0 else None


def gpu_mismatch(
    study_gpu: GpuSpec, reported: Sequence[str], gpus: Mapping[str, GpuSpec] | None = None
) -> str | None:
    """One sentence where the study's GPU is not the one NVML reports here; None where they
    agree, or where NVML reports no GPU or the study's device is not one NVML reads (a CPU
    host, AMD's parts)."""
    if not reported or not study_gpu.has_nvml:
        return None
    found = {name: identify_gpu(name, gpus) for name in dict.fromkeys(reported)}
    if any(g is not None and g.name == study_gpu.name for g in found.values()):
        return None
    seen = ", ".join(
        f"{name} ({g.name if g is not None else 'not in the catalogue'})"
        for name, g in found.items()
    )
    return (
        f"the study prices a {study_gpu.display_name} (gpu: {study_gpu.name}) but NVML reports "
        f"{seen}: every prediction used another part's peaks, memory and bandwidth"
    )


def study_gpu_mismatch(study: StudySpec, host: HostInfo | None) -> str | None:
    """``gpu_mismatch`` for a run whose backend launches real vLLM here (the GPUs NVML sees
    are the server's); an attached server may run elsewhere, and the simulator on no GPU."""
    if host is None or study.backend.launch_command is None:
        return None
    return gpu_mismatch(study.gpu, host.gpus)
