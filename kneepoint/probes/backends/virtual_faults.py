"""The faults of ``kneepoint.records.faults`` on the virtual clock: the in-process engine's
load points come out as the live server's would have been measured under them.

Failed requests are marked on the records the engine produced (their work still counted in
the engine's time: a conservative reading, since a dropped request frees its batch slot
sooner on a real server); a ``/metrics`` page that does not parse leaves the point without
the engine's signals, absent or failing NVML without the GPU's; a crash or a hang ends the
server at its time, mid-point, as the ``Failure`` with the cause the launcher would
have classified.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from kneepoint.probes.server import Failure
from kneepoint.records import CRASH_TEXT, MARKER, Faults, RequestRecord, Signals

log = structlog.get_logger(__name__)

HTTP_500 = "HTTP 500: EngineCore encountered an issue."
DROPPED = (
    "RemoteProtocolError: peer closed connection without sending complete message "
    "body (incomplete chunked read)"
)
"""What the load generator records for these faults over HTTP (httpx's words)."""

_ENGINE_SIGNALS = (
    "kv_usage_mean",
    "kv_usage_max",
    "running_mean",
    "running_max",
    "waiting_mean",
    "preemptions_per_s",
    "prefix_hit_rate",
    "tokens_per_step_mean",
    "steps_per_s",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "num_gpu_blocks",
    "block_size",
)
_GPU_SIGNALS = (
    "gpu_util_pct",
    "memory_util_pct",
    "sm_util_pct",
    "tensor_util_pct",
    "dram_bw_util_pct",
    "power_w",
)


def faulted_records(
    records: Sequence[RequestRecord], faults: Faults, arrived: int = 0
) -> tuple[RequestRecord, ...]:
    """``records`` with each request's drawn fault applied; ``arrived``: requests the server
    took before these (the draw goes by arrival number, counted from 1 per server, as the
    live server counts them)."""
    out = []
    for record in records:
        fault = faults.request_fault(arrived + record.index + 1)
        if fault is None:
            out.append(record)
            continue
        log.debug(f"{MARKER} {fault}", request=arrived + record.index + 1)
        kept = record.chunk_times_s[:1] if fault == "cut" else ()
        error = HTTP_500 if fault == "5xx" else DROPPED
        update = {"chunk_times_s": kept, "end_s": None, "output_tokens": len(kept), "error": error}
        out.append(record.model_copy(update=update))
    return tuple(out)


def faulted_signals(signals: Signals, faults: Faults) -> Signals:
    """The signals a client could still read: none of the engine's from an unparseable
    ``/metrics``, none of the GPU's without NVML."""
    drop: dict[str, object] = {}
    if faults.malformed_metrics:
        drop |= dict.fromkeys(_ENGINE_SIGNALS) | {"metric_samples": 0}
    if faults.nvml != "ok":
        drop |= dict.fromkeys(_GPU_SIGNALS) | {"gpu_samples": 0}
    return signals.model_copy(update=drop) if drop else signals


@dataclass
class Lifetime:
    """How long the in-process server has been up, and the crash or hang that ends it."""

    faults: Faults
    up_s: float = 0.0
    arrived: int = 0
    """Requests the server has taken."""

    def serve(self, duration_s: float, give_up_s: float) -> tuple[float, Failure | None]:
        """Account for a point of ``duration_s``: the seconds it held the server, and the
        failure that ended it, if the server died or hung during it (a hang holds it until
        the client gives up, ``give_up_s`` later)."""
        ends = [
            (at, kind)
            for at, kind in (
                (self.faults.crash_after_s, "crashed"),
                (self.faults.hang_after_s, "hung"),
            )
            if at is not None
        ]
        for at, kind in sorted(ends):
            if self.up_s + duration_s > at:
                held = max(0.0, at - self.up_s) + (give_up_s if kind == "hung" else 0.0)
                self.up_s = at
                log.warning(f"{MARKER} {'crash' if kind == 'crashed' else 'hang'}", after_s=at)
                return held, _failure(kind, at)
        self.up_s += duration_s
        return duration_s, None


def _failure(kind: str, at_s: float) -> Failure:
    if kind == "crashed":
        return Failure("crashed", CRASH_TEXT, 1, (CRASH_TEXT,))
    return Failure("hung", f"no answer since {at_s:.0f} s after start-up", None, ())
