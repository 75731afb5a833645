"""A study's backend opened for one configuration: a ``Prober`` for the sweeps.

The simulator on its virtual clock runs each load point in-process; every other backend is
an HTTP endpoint (``kneepoint sim serve``, a launched ``vllm serve``, or an attached server)
driven by the load generator, warmed by a burst of its workload before its first point
(``kneepoint.probes.warmup``). A server that dies between load points raises
``ServerFailedError`` with the failure named, rather than being measured as slow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import structlog
import yaml

from kneepoint.config.trace import workload_trace
from kneepoint.load.plan import PlannedRequest, plan_requests, point_seed, rate_salt
from kneepoint.load.size import PointSize
from kneepoint.load.trust import Trust
from kneepoint.probes.backends import (
    Backend,
    Endpoint,
    LaunchBackend,
    RunningServer,
    sim_argv,
    vllm_argv,
)
from kneepoint.probes.credentials import api_key, server_env
from kneepoint.probes.loadgen import LoadOptions
from kneepoint.probes.measure import Instruments, measure
from kneepoint.probes.server_failure import ServerFailedError
from kneepoint.probes.target import (
    DeviceClock,
    Keep,
    Opening,
    PointArtifacts,
    Prober,
    Sender,
    Target,
    rejected,
)
from kneepoint.probes.virtual_target import virtual_target
from kneepoint.probes.warmup import warm_up
from kneepoint.records.backend_spec import AttachBackend, SimBackend
from kneepoint.records.engine import EngineConfig
from kneepoint.records.faults import fault_flags
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.measure import RequestRecord
from kneepoint.records.study import StudySpec
from kneepoint.records.workload import TraceEntry

log = structlog.get_logger(__name__)
__all__ = ["Keep", "PointArtifacts", "PointSize", "Target", "open_target"]


_DEFAULT_SIZE = PointSize()


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
    kind = "sim-virtual" if spec.virtual_clock else spec.kind
    # The workload's trace is read once for every load point.
    opening = Opening(study, config, trial_dir, size, keep, workload_trace(study.workload), launch)
    with BACKENDS[kind](opening) as target:
        yield target


def _sim_server(o: Opening) -> Backend:
    calibration = _calibration_file(o.study, o.trial_dir)
    faults = fault_flags(o.faults) if o.faults is not None else []
    argv = sim_argv(o.study.gpu.name, o.study.model.name, calibration, faults)
    return LaunchBackend(argv, sim_telemetry=True, nice=o.study.measurement.server_nice)


def _vllm_server(o: Opening) -> Backend:
    spec = o.study.backend
    assert not isinstance(spec, SimBackend | AttachBackend)
    key = api_key(o.study)
    nvml = None if o.study.gpu.is_cpu else spec.gpu_index or 0  # a CPU host has no NVML
    return LaunchBackend(
        vllm_argv(spec),
        env=server_env(o.study, spec, key),
        host=spec.host,
        port=spec.port,
        startup_timeout_s=spec.startup_timeout_s,
        nvml_index=nvml,
        api_key=key,
        nice=o.study.measurement.server_nice,
    )


def _attached(o: Opening) -> Backend:
    spec = o.study.backend
    assert isinstance(spec, AttachBackend)
    return RunningServer(spec.url, api_key=api_key(o.study))


def _over_http(
    make: Callable[[Opening], Backend],
) -> Callable[[Opening], AbstractContextManager[Target]]:
    """An opener for a backend served over HTTP and driven by the load generator."""

    @contextmanager
    def opener(o: Opening) -> Iterator[Target]:
        clock = DeviceClock(o.config.tensor_parallel_size or 1)
        with make(o).serve(o.config, o.trial_dir) as endpoint:
            warm_up(endpoint.url, o.study, _options(o.study, endpoint))
            yield Target(
                _http_prober(o.study, endpoint, o.size, o.trace, o.keep),
                endpoint,
                clock,
                _http_sender(o.study, endpoint),
            )

    return opener


BACKENDS: dict[str, Callable[[Opening], AbstractContextManager[Target]]] = {
    "sim-virtual": virtual_target,
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


def _options(study: StudySpec, endpoint: Endpoint) -> LoadOptions:
    client = study.workload.client
    return LoadOptions(
        model=endpoint.served_model,
        request_timeout_s=client.request_timeout_s,
        max_concurrency=client.max_concurrency,
        ignore_eos=client.ignore_eos,
        api_key=endpoint.api_key,
    )


def _http_sender(study: StudySpec, endpoint: Endpoint) -> Sender:
    def send(plan: Sequence[PlannedRequest], rate: float) -> tuple[RequestRecord, ...]:
        measured = measure(
            endpoint.url,
            plan,
            rate,
            _options(study, endpoint),
            study.slo,
            instruments=endpoint.instruments,
        )
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
        endpoint.instruments,
        scrape_interval_s=(every or 1.0) * 2**attempt,
        adaptive_scrapes=every is None,
    )


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
            study.workload,
            rate,
            num_requests=size.requests(rate),
            seed=point_seed(study.workload.seed, repeat, attempt),
            trace=trace,
            vocab_size=study.model.vocab_size,
            salt=rate_salt(rate, attempt),  # one live server: no prompt repeats an earlier one
        )
        measured = measure(
            endpoint.url,
            plan,
            rate,
            options,
            study.slo,
            instruments=_instruments(study, endpoint, attempt),
            trust=trust,
            warmup_s=size.warmup_s,
        )
        if keep is not None:
            keep(
                PointArtifacts(
                    rate, repeat, measured.point, measured.records, measured.metrics_text, attempt
                )
            )
        failure = endpoint.failure() or rejected(measured.records)
        if failure is not None:
            raise ServerFailedError(failure)
        return measured.point

    return probe
