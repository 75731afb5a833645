"""A study's backend opened for one configuration: a ``Prober`` for the sweeps.

The simulator on its virtual clock runs each load point in-process; every other backend is
an HTTP endpoint (``kneepoint sim serve``, a launched ``vllm serve``, or an attached server)
driven by the load generator. A server that dies between load points raises
``ServerFailedError`` with the failure named, rather than being measured as slow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kneepoint.config.trace import workload_trace
from kneepoint.load.plan import plan_requests
from kneepoint.probes.backends import (
    AttachBackend,
    Backend,
    Endpoint,
    LaunchBackend,
    sim_argv,
    vllm_argv,
)
from kneepoint.probes.loadgen import LoadOptions
from kneepoint.probes.measure import measure
from kneepoint.probes.process import ServerFailedError
from kneepoint.probes.sweep import Prober
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.study import AttachBackend as AttachSpec
from kneepoint.records.study import SimBackend, StudySpec
from kneepoint.records.workload import TraceEntry
from kneepoint.sim.loadpoint import simulate_load_point


@dataclass(frozen=True, slots=True)
class PointSize:
    """How much load one point sends: ``seconds`` of arrivals, at least ``min_requests``."""

    seconds: float = 20.0
    min_requests: int = 40

    def requests(self, rate_rps: float) -> int:
        return max(self.min_requests, round(rate_rps * self.seconds))


@dataclass(frozen=True, slots=True)
class Target:
    probe: Prober
    endpoint: Endpoint | None
    """None on the virtual clock."""


@contextmanager
def open_target(
    study: StudySpec, config: EngineConfig, trial_dir: Path, size: PointSize = PointSize()
) -> Iterator[Target]:
    spec = study.backend
    trace = workload_trace(study.workload)  # read once for every load point
    if isinstance(spec, SimBackend) and spec.clock == "virtual":

        def virtual(rate: float, repeat: int) -> LoadPoint:
            seed = study.workload.seed + repeat
            return simulate_load_point(
                study, rate, size.requests(rate), config, seed, trace=trace
            ).point

        yield Target(virtual, None)
        return
    if isinstance(spec, SimBackend):
        backend: Backend = LaunchBackend(
            sim_argv(study.gpu.name, study.model.name), sim_telemetry=True
        )
    elif isinstance(spec, AttachSpec):
        backend = AttachBackend(spec.url)
    else:
        backend = LaunchBackend(
            vllm_argv(spec), env=spec.env, host=spec.host, port=spec.port,
            startup_timeout_s=spec.startup_timeout_s, nvml_index=0,
        )  # fmt: skip
    with backend.serve(config, trial_dir) as endpoint:
        yield Target(_http_prober(study, endpoint, size, trace), endpoint)


def _http_prober(
    study: StudySpec, endpoint: Endpoint, size: PointSize, trace: Sequence[TraceEntry]
) -> Prober:
    options = LoadOptions(model=endpoint.served_model)

    def probe(rate: float, repeat: int) -> LoadPoint:
        plan = plan_requests(
            study.workload, rate, num_requests=size.requests(rate),
            seed=study.workload.seed + repeat, trace=trace,
        )  # fmt: skip
        measured = measure(
            endpoint.url, plan, rate, options, study.slo, instruments=endpoint.instruments
        )
        failure = endpoint.failure()
        if failure is not None:
            raise ServerFailedError(failure)
        return measured.point

    return probe
