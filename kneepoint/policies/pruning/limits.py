"""What bounds the search whatever binds: the study's knob list, the vLLM release, what the
backend owns and models, the GPUs a server may use, and conditions outside the engine (shared
prefixes to reuse, a device vLLM offloads KV from)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.records import BackendSpec, Knob, TraceArrivals, Workload


def has_shared_prefixes(workload: Workload) -> bool:
    """Whether prompts can share prefixes (prefix groups in use, or a trace that may name them)."""
    if isinstance(workload.arrival, TraceArrivals):
        return True
    return any(c.prefix_group is not None for c in workload.classes)


@dataclass(frozen=True, slots=True)
class Limits:
    """What bounds the search whatever binds."""

    allowed: Sequence[str]
    version: str | None
    backend: BackendSpec
    gpus: int
    shared_prefixes: bool
    offloads_kv: bool
    """The device offloads KV to host memory (``GpuSpec.offloads_kv``)."""
    moe: bool = False
    """The model routes its tokens to experts (``ModelSpec.is_moe``)."""

    def reason_out(self, knob: Knob) -> str | None:
        """Why ``knob`` is out whatever binds, or None."""
        checks = (
            (not self.backend.owns_knobs, "attached to a running server: its knobs are not ours"),
            (
                bool(self.allowed) and knob.name not in self.allowed,
                "not in the study's search.knobs",
            ),
            (
                self.version is not None and not knob.known_by(self.version),
                f"vLLM {self.version} does not know {knob.flag} (needs {knob.vllm_versions})",
            ),
            (
                knob.name in self.backend.unmodeled_knobs,
                self.backend.unmodeled_knobs.get(knob.name, ""),
            ),
            (
                "multiple_gpus" in knob.needs and self.gpus < 2,
                "needs several GPUs per server; the study has one",
            ),
            (
                "shared_prefixes" in knob.needs and not self.shared_prefixes,
                "the workload's prompts share no prefixes: nothing for it to reuse",
            ),
            ("moe_model" in knob.needs and not self.moe, "the model is dense: it has no experts"),
            (
                "kv_host_offload" in knob.needs and not self.offloads_kv,
                "vLLM offloads KV to host memory only from CUDA-alike GPUs and XPUs (its CPU "
                'build: "CPU Offloading is currently only supported on CUDA-alike and XPU '
                'GPUs")',
            ),
        )
        return next((reason for failed, reason in checks if failed), None)
