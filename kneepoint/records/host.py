"""The machine a run measured from: what a reader needs to weigh its numbers."""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import Record


class HostInfo(Record):
    """The host's CPU and GPUs, as the run found them at its start."""

    cpu_model: str | None = None
    """``/proc/cpuinfo``'s model name (None where the platform does not say)."""
    cpu_cores: int = Field(ge=1)
    """Cores this process may run on (its affinity), not the machine's count."""
    isa: tuple[str, ...] = ()
    """The vector and matrix extensions that change vLLM's CPU build's speed, present here
    (``avx2``, ``avx512f``, ``avx512_bf16``, ``amx_bf16``): without AVX-512 its oneDNN linear
    falls back to torch's and runs 7-10x slower."""
    gpus: tuple[str, ...] = ()
    """Each visible GPU's name, by NVML index (empty without a driver or a GPU)."""
    gpu_driver: str | None = None

    def words(self) -> str:
        """One line: ``AMD EPYC 7B13, 2 cores, AVX2 (no AVX-512); no GPU``."""
        cpu = self.cpu_model or "an unnamed CPU"
        vector = "AVX-512" if "avx512f" in self.isa else "AVX2" if "avx2" in self.isa else None
        isa = [vector or "neither AVX2 nor AVX-512"]
        if vector == "AVX2":
            isa[0] += " (no AVX-512)"
        isa += [flag.upper().replace("_", "-") for flag in self.isa if flag.startswith("amx")]
        cores = f"{self.cpu_cores} core" + ("s" if self.cpu_cores != 1 else "")
        gpu = "no GPU"
        if self.gpus:
            counted = {name: self.gpus.count(name) for name in self.gpus}
            gpu = ", ".join(f"{n} x {name}" for name, n in counted.items())
            gpu += f" (driver {self.gpu_driver})" if self.gpu_driver else ""
        return f"{cpu}, {cores}, {', '.join(isa)}; {gpu}"
