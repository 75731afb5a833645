"""Every kind of backend a study can name, one module a kind (httpx's transports are the
model), behind one opener: ``open_target`` serves a configuration and hands the sweeps a
``Target``. The simulator comes twice: in-process on its virtual clock (``sim_virtual``), or
launched as ``kneepoint sim serve`` (``sim_http``); ``vllm`` launches real ``vllm serve``;
``attach`` reaches a server someone else runs. Every kind but the virtual clock is an HTTP
endpoint driven by the load generator (``http``); the launched ones share one process
launcher (``launch``); what they all share is ``base``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from kneepoint.config import workload_trace
from kneepoint.load import PointSize
from kneepoint.probes.backends.attach import RunningServer, attached
from kneepoint.probes.backends.base import (
    Backend,
    Endpoint,
    Keep,
    Opening,
    Prober,
    Target,
    server_version,
)
from kneepoint.probes.backends.http import over_http
from kneepoint.probes.backends.launch import LaunchBackend
from kneepoint.probes.backends.sim_http import sim_argv, sim_server
from kneepoint.probes.backends.sim_virtual import virtual_target
from kneepoint.probes.backends.vllm import vllm_argv, vllm_server
from kneepoint.records import EngineConfig, StudySpec

__all__ = [
    "BACKENDS",
    "Backend",
    "Endpoint",
    "Keep",
    "LaunchBackend",
    "Prober",
    "RunningServer",
    "Target",
    "open_target",
    "server_version",
    "sim_argv",
    "vllm_argv",
]

_SIM_HTTP = over_http(sim_server)


def _simulator(o: Opening) -> AbstractContextManager[Target]:
    """The simulator on the clock its study names: in-process, or launched over HTTP."""
    return virtual_target(o) if o.study.backend.virtual_clock else _SIM_HTTP(o)


BACKENDS: dict[str, Callable[[Opening], AbstractContextManager[Target]]] = {
    "sim": _simulator,
    "vllm": over_http(vllm_server),
    "attach": over_http(attached),
}
"""Every backend a study can name, by its ``kind``, each opened the same way."""

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
    # The workload's trace is read once for every load point.
    opening = Opening(study, config, trial_dir, size, keep, workload_trace(study.workload), launch)
    with BACKENDS[study.backend.kind](opening) as target:
        yield target
