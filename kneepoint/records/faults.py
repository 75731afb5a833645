"""Faults the simulator injects on purpose, so the loop's handling of each can be tested.

One record serves both simulators: ``kneepoint sim serve`` takes every field as a
``--fault-*`` flag (``fault_flags``), and the in-process engine on the virtual clock takes
the record itself. The failures are the ones an overnight run meets on real servers: vLLM
refusing to start out of memory, a CUDA error killing the engine mid-sweep, a wedged server
that still accepts connections, a slow model load, 5xx answers and dropped connections
under load, a stream cut mid-response, a ``/metrics`` page that does not parse, and NVML
missing or failing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import InputRecord

NvmlFault = Literal["ok", "absent", "failing"]

OOM_TEXT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.19 GiB of which 1.06 GiB is free."
)
"""vLLM's own words when the weights or activations do not fit (the failure classifier in
``kneepoint.probes.server.process`` matches them, as it matches a real server's)."""
CRASH_TEXT = "RuntimeError: CUDA error: an illegal memory access was encountered"
"""The line a real engine core dies with on an Xid fault: the commonest mid-run crash."""
MARKER = "kneepoint-fault:"
"""Every injection logs one line starting with this, so a benchmark can count them."""


class Faults(InputRecord):
    """What to break, and on which server launches (``launches``; every launch by default).

    Times count from the moment the server is up (the virtual clock counts from the end of
    its modelled start-up)."""

    startup_oom: bool = False
    """Refuse to start with vLLM's out-of-memory error, exit 1."""
    slow_start_s: float = Field(default=0.0, ge=0.0)
    """Extra seconds before the server answers /health (a slow model load)."""
    crash_after_s: float | None = Field(default=None, gt=0.0)
    """Die with a CUDA error this long after coming up."""
    hang_after_s: float | None = Field(default=None, ge=0.0)
    """From this long after coming up, accept connections and answer nothing."""
    error_5xx_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of generation requests answered 500."""
    reset_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of generation requests whose connection is dropped before the first token."""
    stream_cut_fraction: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of streamed responses cut after their first token."""
    malformed_metrics: bool = False
    """``/metrics`` answers text that is not Prometheus exposition format."""
    nvml: NvmlFault = "ok"
    """The GPU counters: ``absent`` (no such source), ``failing`` (every read errors)."""
    launches: tuple[int, ...] | None = None
    """Which server launches of one agent process get the faults, counting from 1 (the
    baseline's knee search is launch 1); None: every launch."""
    seed: int = 0
    """Seeds the choice of which requests fail."""

    def applies_to(self, launch: int) -> bool:
        return self.launches is None or launch in self.launches

    def request_fault(self, index: int) -> Literal["5xx", "reset", "cut"] | None:
        """The fault request ``index`` meets, if any: a fixed draw per (seed, request), so
        the same requests fail on every backend and every repeat of a run."""
        draw = _unit_hash(self.seed, index)
        for kind, share in (
            ("5xx", self.error_5xx_fraction),
            ("reset", self.reset_fraction),
            ("cut", self.stream_cut_fraction),
        ):
            if draw < share:
                return kind  # type: ignore[return-value]
            draw -= share
        return None

    def signal_faults(self) -> list[str]:
        """The faults in what a client reads besides its answers, by name."""
        return (["malformed_metrics"] if self.malformed_metrics else []) + (
            [f"nvml_{self.nvml}"] if self.nvml != "ok" else []
        )

    def injected(self) -> bool:
        """Whether any fault is switched on."""
        return self != Faults(launches=self.launches, seed=self.seed)


def fault_flags(faults: Faults) -> list[str]:
    """The ``kneepoint sim serve`` flags that inject ``faults`` (defaults left out)."""
    flags: list[str] = []
    for name, value in faults.model_dump(exclude_defaults=True, exclude={"launches"}).items():
        flag = "--fault-" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag)
        else:
            flags += [flag, str(value)]
    return flags


def _unit_hash(seed: int, index: int) -> float:
    """A number in [0, 1) fixed by (seed, index): splitmix64, so no global RNG is touched."""
    x = (seed * 0x9E3779B97F4A7C15 + index + 1) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((x ^ (x >> 31)) >> 11) / float(1 << 53)
