"""What every backend kind shares (httpx's transports are the model: one base, one module a
kind): the ``Endpoint`` a served configuration is reached at, the ``Backend`` that serves one,
what an opened backend hands the sweeps (``Target``: a prober, its endpoint, the device time
it holds, a sender for shaped loads), what each measured point leaves behind, and what every
kind's opener is given."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import structlog
from packaging.version import InvalidVersion, Version

from kneepoint.load import PlannedRequest, PointSize
from kneepoint.probes.backends.measure import Instruments
from kneepoint.probes.client import bearer, tls_context
from kneepoint.probes.server import Failure, ServerProcess
from kneepoint.records import (
    EngineConfig,
    Faults,
    LoadPoint,
    PointArtifacts,
    RequestRecord,
    StudySpec,
    TraceEntry,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server ready for load: where, under which model name, and what measures it."""

    url: str
    served_model: str
    instruments: Instruments = field(default_factory=Instruments)
    process: ServerProcess | None = None
    kv_capacity_tokens: int | None = None
    notes: tuple[str, ...] = field(default=())
    version: str | None = None
    """The engine release the server reports at ``/version`` (None: it does not say)."""
    api_key: str | None = field(default=None, repr=False)
    """What every client sends as ``Authorization: Bearer`` (None: no key)."""

    def failure(self) -> Failure | None:
        """Why the server is gone, if its process has exited (None: still up, or not ours)."""
        if self.process is None or self.process.alive():
            return None
        return self.process.failure()


class Backend(Protocol):
    def serve(self, config: EngineConfig, trial_dir: Path) -> AbstractContextManager[Endpoint]:
        """The server for ``config``, up and checked, for the length of the ``with``."""
        ...


class Prober(Protocol):
    """Measures one offered rate: ``repeat`` picks the requests drawn, ``attempt`` > 0 is a
    retake of a point that could not tell."""

    def __call__(self, rate_rps: float, repeat: int, attempt: int = 0, /) -> LoadPoint: ...


Keep = Callable[[PointArtifacts], None]
Sender = Callable[[Sequence[PlannedRequest], float], tuple[RequestRecord, ...]]
"""(a plan of requests, its mean rate) -> every request's record: a load shaped over time
(a burst), where a prober sends one rate."""


@dataclass
class DeviceClock:
    """Device time a target has held: wall time while a real server is up (times its GPUs);
    on the virtual clock, the modelled start-up plus the simulated length of every point."""

    gpus: int = 1
    virtual_s: float | None = None
    started: float = field(default_factory=time.monotonic)

    def seconds(self) -> float:
        held = self.virtual_s if self.virtual_s is not None else time.monotonic() - self.started
        return held * self.gpus


@dataclass(frozen=True, slots=True)
class Target:
    probe: Prober
    endpoint: Endpoint | None
    """None on the virtual clock."""
    clock: DeviceClock = field(default_factory=DeviceClock)
    send: Sender | None = None


@dataclass(frozen=True, slots=True)
class Opening:
    """What every backend's opener is given."""

    study: StudySpec
    config: EngineConfig
    trial_dir: Path
    size: PointSize
    keep: Keep | None
    trace: Sequence[TraceEntry]
    launch: int

    @property
    def faults(self) -> Faults | None:
        """The study's injected faults, where they apply to this launch."""
        faults = self.study.backend.injected_faults
        return faults if faults is not None and faults.applies_to(self.launch) else None


def rejected(records: Sequence[RequestRecord]) -> Failure | None:
    """A server that failed every request of a point: no capacity to measure, and lower
    rates would only fail the same requests more slowly. Some timed out: an overloaded
    server, unless not one request got a token (a hung one, which took requests and never
    answered one: no diagnosis or knob advice applies to it). All refused with a
    client error: the workload does not fit it (token ids beyond its vocabulary, prompts past
    max_model_len); anything else (5xx answers, broken streams): a broken server."""
    if not records or any(r.ok for r in records):
        return None
    errors = [r.error or "no answer" for r in records]
    timed_out = sum(e.startswith("timed out") for e in errors)
    if timed_out and any(r.chunk_times_s for r in records):
        return None  # an overloaded server, not a broken one
    if timed_out:
        first = next(e for e in errors if e.startswith("timed out"))
        message = (
            f"not one request of the point got a token ({timed_out} of {len(errors)} "
            f"timed out: {first})"
        )
        return Failure("hung", message, None, ())
    if all(e.startswith("HTTP 4") for e in errors):
        return Failure(
            "bad_argument", f"the server refuses the workload's requests: {errors[0]}", None, ()
        )
    common = max(set(errors), key=errors.count)
    message = (
        f"the server failed every request of the point ({len(errors)} of "
        f"{len(errors)}; {errors.count(common)} of them: {common})"
    )
    return Failure("crashed", message, None, ())


def server_version(url: str, api_key: str | None = None) -> str | None:
    """The release a vLLM server reports at ``/version``; None where it has no such route or
    answers something that is not a version (the knobs a release knows are read from it)."""
    try:
        with httpx.Client(timeout=5.0, headers=bearer(api_key), verify=tls_context()) as client:
            response = client.get(f"{url}/version")
        body = response.json() if response.status_code == 200 else None
        version = str(body.get("version")) if isinstance(body, dict) else None
        if version:
            Version(version)  # raises InvalidVersion: "0.0-hostile" is no release
        return version
    except (httpx.HTTPError, ValueError, InvalidVersion) as exc:
        log.warning("server.version_unread", url=url, error=str(exc))
        return None
