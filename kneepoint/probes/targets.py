"""A study's backend opened for one configuration: a ``Prober`` for the sweeps.

The simulator on its virtual clock runs each load point in-process; every other backend is
an HTTP endpoint (``kneepoint sim serve``, a launched ``vllm serve``, or an attached server)
driven by the load generator. A server that dies between load points raises
``ServerFailedError`` with the failure named, rather than being measured as slow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import structlog
import yaml

from kneepoint.config.trace import workload_trace
from kneepoint.load.plan import PlannedRequest, plan_requests, point_seed, rate_salt
from kneepoint.load.point import load_point
from kneepoint.load.size import PointSize
from kneepoint.load.trust import Trust
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.startup import startup_seconds
from kneepoint.probes.backends import (
    AttachBackend,
    Backend,
    Endpoint,
    LaunchBackend,
    sim_argv,
    vllm_argv,
)
from kneepoint.probes.credentials import api_key, server_env
from kneepoint.probes.loadgen import LoadOptions
from kneepoint.probes.measure import Instruments, measure
from kneepoint.probes.process import Failure, ServerFailedError
from kneepoint.probes.sweep_run import Prober
from kneepoint.probes.virtual_faults import Lifetime, faulted_records, faulted_signals
from kneepoint.records.engine import EngineConfig
from kneepoint.records.faults import MARKER, Faults, fault_flags
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.measure import RequestRecord
from kneepoint.records.study import AttachBackend as AttachSpec
from kneepoint.records.study import SimBackend, StudySpec
from kneepoint.records.workload import TraceEntry
from kneepoint.sim.engine import SimEngine
from kneepoint.sim.fault_server import refuse_start
from kneepoint.sim.loadpoint import simulate_load_point
from kneepoint.sim.virtual import run_plan

log = structlog.get_logger(__name__)
__all__ = ["Keep", "PointArtifacts", "PointSize", "Target", "open_target"]


_DEFAULT_SIZE = PointSize()
_SEND_TIMEOUT_S = 120.0
"""A request still unfinished this long after a sent plan's last send counts as timed out."""


@dataclass(frozen=True, slots=True)
class PointArtifacts:
    """What one measured point leaves behind besides its LoadPoint."""

    rate_rps: float
    repeat: int
    point: LoadPoint
    records: tuple[RequestRecord, ...]
    metrics_text: tuple[str, ...] = ()
    """``/metrics`` before and after the load (HTTP backends only)."""


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
class _Opening:
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
        spec = self.study.backend
        if not isinstance(spec, SimBackend) or spec.faults is None:
            return None
        return spec.faults if spec.faults.applies_to(self.launch) else None


@contextmanager
def open_target(
    study: StudySpec,
    config: EngineConfig,
    trial_dir: Path,
    size: PointSize = _DEFAULT_SIZE,
    keep: Keep | None = None,
    *,
    launch: int = 1,
) -> Iterator[Target]:
    """The study's backend serving ``config`` for the length of the ``with``; ``keep`` gets
    every measured point's records (and metric snapshots) as it is measured; ``launch``
    counts the servers this agent has started (the simulator's faults pick by it)."""
    spec = study.backend
    kind = "sim-virtual" if isinstance(spec, SimBackend) and spec.clock == "virtual" else spec.kind
    # The workload's trace is read once for every load point.
    opening = _Opening(study, config, trial_dir, size, keep, workload_trace(study.workload),
                       launch)  # fmt: skip
    with BACKENDS[kind](opening) as target:
        yield target


@contextmanager
def _virtual(o: _Opening) -> Iterator[Target]:
    """The simulator in-process, on its virtual clock: no server, no HTTP."""
    study, config, size, faults = o.study, o.config, o.size, o.faults or Faults()
    refuse_start(faults)
    engine = resolve_engine(config, study.gpu, study.model)
    started = startup_seconds(study.model, engine) + faults.slow_start_s
    clock = DeviceClock(config.tensor_parallel_size or 1, virtual_s=started)
    life = Lifetime(faults)
    for kind in faults.signal_faults():  # as the live server says it, once per launch
        log.warning(f"{MARKER} {kind}")
    if faults.slow_start_s > 0:
        log.warning(f"{MARKER} slow_start", seconds=faults.slow_start_s)

    def virtual(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
        seed = point_seed(study.workload.seed, repeat, attempt)
        simulated = simulate_load_point(
            study, rate, size.requests(rate, attempt), config, seed, trace=o.trace,
            warmup_s=size.warmup_s, trust=Trust.of(study.slo, study.measurement),
        )  # fmt: skip
        point, records = simulated.point, simulated.load.records
        held, died = life.serve(point.duration_s, study.workload.client.request_timeout_s)
        clock.virtual_s = (clock.virtual_s or 0.0) + held
        if died is not None:
            raise ServerFailedError(died)
        if faults.injected():
            records = faulted_records(records, faults, life.arrived)
            point = load_point(rate, records, study.slo, warmup_s=size.warmup_s,
                               signals=faulted_signals(point.signals, faults),
                               trust=Trust.of(study.slo, study.measurement))  # fmt: skip
        life.arrived += len(records)
        if o.keep is not None:
            o.keep(PointArtifacts(rate, repeat, point, records))
        failure = rejected(records)
        if failure is not None:
            raise ServerFailedError(failure)
        return point

    def send(plan: Sequence[PlannedRequest], rate: float) -> tuple[RequestRecord, ...]:
        sim = SimEngine(study.gpu, study.model, config, study.efficiency)
        load = run_plan(sim, plan, timeout_s=_SEND_TIMEOUT_S,
                        request_timeout_s=study.workload.client.request_timeout_s)  # fmt: skip
        clock.virtual_s = (clock.virtual_s or 0.0) + sim.now_s
        return load.records

    yield Target(virtual, None, clock, send)


def _sim_server(o: _Opening) -> Backend:
    calibration = _calibration_file(o.study, o.trial_dir)
    faults = fault_flags(o.faults) if o.faults is not None else []
    argv = sim_argv(o.study.gpu.name, o.study.model.name, calibration, faults)
    return LaunchBackend(argv, sim_telemetry=True)


def _vllm_server(o: _Opening) -> Backend:
    spec = o.study.backend
    assert not isinstance(spec, SimBackend | AttachSpec)
    key = api_key(o.study)
    return LaunchBackend(vllm_argv(spec), env=server_env(o.study, spec, key), host=spec.host,
                         port=spec.port, startup_timeout_s=spec.startup_timeout_s,
                         nvml_index=spec.gpu_index or 0,
                         api_key=key)  # fmt: skip


def _attached(o: _Opening) -> Backend:
    spec = o.study.backend
    assert isinstance(spec, AttachSpec)
    return AttachBackend(spec.url, api_key=api_key(o.study))


def _over_http(
    make: Callable[[_Opening], Backend],
) -> Callable[[_Opening], AbstractContextManager[Target]]:
    """An opener for a backend served over HTTP and driven by the load generator."""

    @contextmanager
    def opener(o: _Opening) -> Iterator[Target]:
        clock = DeviceClock(o.config.tensor_parallel_size or 1)
        with make(o).serve(o.config, o.trial_dir) as endpoint:
            yield Target(_http_prober(o.study, endpoint, o.size, o.trace, o.keep), endpoint,
                         clock, _http_sender(o.study, endpoint))  # fmt: skip

    return opener


BACKENDS: dict[str, Callable[[_Opening], AbstractContextManager[Target]]] = {
    "sim-virtual": _virtual,
    "sim": _over_http(_sim_server),
    "vllm": _over_http(_vllm_server),
    "attach": _over_http(_attached),
}
"""Every backend a study can name, by kind (the simulator twice: in-process on its virtual
clock, or launched as ``kneepoint sim serve``), each opened the same way."""


def _calibration_file(study: StudySpec, trial_dir: Path) -> Path | None:
    """The study's calibration written into the trial's folder, for the launched simulator to
    read (and to show what it served with); None without one."""
    if study.calibration is None:
        return None
    trial_dir.mkdir(parents=True, exist_ok=True)
    path = trial_dir / "calibration.yaml"
    path.write_text(yaml.safe_dump(study.calibration.model_dump(mode="json"), sort_keys=False))
    return path


def rejected(records: Sequence[RequestRecord]) -> Failure | None:
    """A server that failed every request of a point, none of them by timing out: no
    capacity to measure, and lower rates would only fail the same requests more slowly.
    All refused with a client error: the workload does not fit it (token ids beyond its
    vocabulary, prompts past max_model_len); anything else (5xx answers, broken streams):
    a broken server."""
    if not records or any(r.ok for r in records):
        return None
    errors = [r.error or "no answer" for r in records]
    if any(e.startswith("timed out") for e in errors):
        return None  # an overloaded server, not a broken one
    if all(e.startswith("HTTP 4") for e in errors):
        return Failure("bad_argument", f"the server refuses the workload's requests: "
                       f"{errors[0]}", None, ())  # fmt: skip
    common = max(set(errors), key=errors.count)
    message = (f"the server failed every request of the point ({len(errors)} of "
               f"{len(errors)}; {errors.count(common)} of them: {common})")  # fmt: skip
    return Failure("crashed", message, None, ())


def _options(study: StudySpec, endpoint: Endpoint) -> LoadOptions:
    client = study.workload.client
    return LoadOptions(model=endpoint.served_model, request_timeout_s=client.request_timeout_s,
                       max_concurrency=client.max_concurrency,
                       ignore_eos=client.ignore_eos, api_key=endpoint.api_key)  # fmt: skip


def _http_sender(study: StudySpec, endpoint: Endpoint) -> Sender:
    def send(plan: Sequence[PlannedRequest], rate: float) -> tuple[RequestRecord, ...]:
        measured = measure(endpoint.url, plan, rate, _options(study, endpoint), study.slo,
                           instruments=endpoint.instruments)  # fmt: skip
        failure = endpoint.failure()
        if failure is not None:
            raise ServerFailedError(failure)
        return tuple(measured.records)

    return send


def _instruments(study: StudySpec, endpoint: Endpoint, attempt: int) -> Instruments:
    """The endpoint's instruments with the study's scrape schedule: its interval, else
    adaptive from 1 s; a retake scrapes half as often as the attempt before it (a lighter
    measurement on a host that could not tell)."""
    every = study.measurement.scrape_interval_s
    return dataclasses.replace(
        endpoint.instruments, scrape_interval_s=(every or 1.0) * 2**attempt,
        adaptive_scrapes=every is None,
    )  # fmt: skip


def _http_prober(
    study: StudySpec,
    endpoint: Endpoint,
    size: PointSize,
    trace: Sequence[TraceEntry],
    keep: Keep | None,
) -> Prober:
    options = _options(study, endpoint)
    trust = Trust.of(study.slo, study.measurement)

    def probe(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
        plan = plan_requests(
            study.workload, rate, num_requests=size.requests(rate, attempt),
            seed=point_seed(study.workload.seed, repeat, attempt), trace=trace,
            vocab_size=study.model.vocab_size,
            salt=rate_salt(rate, attempt),  # one live server: no prompt repeats an earlier one
        )  # fmt: skip
        measured = measure(
            endpoint.url, plan, rate, options, study.slo,
            instruments=_instruments(study, endpoint, attempt), trust=trust,
            warmup_s=size.warmup_s,
        )  # fmt: skip
        if keep is not None:
            keep(PointArtifacts(rate, repeat, measured.point, measured.records,
                                measured.metrics_text))  # fmt: skip
        failure = endpoint.failure() or rejected(measured.records)
        if failure is not None:
            raise ServerFailedError(failure)
        return measured.point

    return probe
