"""A Ray cluster's GPUs as a tuning run's pool: each step a Ray task holding its server's GPUs
as one placement group (STRICT_PACK: one node), started with the GPU ids Ray gave it and
removed when it lands, so a GPU no step holds is Ray's, never held asleep. A task whose node
or worker dies comes back as lost (the driver runs it again and counts the attempt); Ray, not
a heartbeat of ours, notices the death.

Local (no address): a Ray instance of this machine's GPUs (or a custom resource standing in for
them, vLLM's CPU build), bound to 127.0.0.1 and shut down with the pool. Joined
(``ray://`` or ``host:port``): the cluster's own, left running.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
import structlog
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from kneepoint.records import Event, Landed

log = structlog.get_logger(__name__)

Job = Callable[[Sequence[str]], list[Event]]
LOST = (
    ray.exceptions.NodeDiedError,
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.ObjectLostError,
    ray.exceptions.OwnerDiedError,
    ray.exceptions.RaySystemError,
    ray.exceptions.LocalRayletDiedError,
)
"""What Ray raises for a task that died with its node or worker, not by its own error."""
KILLED_S = 5.0
"""How long Ray may take to kill the workers of a removed placement group's steps: at once on a
local instance of this machine; what has not ended by then was still queued."""


@dataclass(frozen=True)
class _Out:
    """One step out: its Ray task, placement group, GPUs and when it was submitted."""

    key: str
    pg: PlacementGroup
    gpus: int
    since: float


@ray.remote(max_retries=0)
def _run(
    job: Job, resource: str, threads: str | None, nice: int
) -> tuple[str, tuple[str, ...], list[Event], tuple[float, float]]:
    """The step on the GPUs Ray gave this task (none for a custom resource), and when; its
    servers get the driver's ``OMP_NUM_THREADS`` (``threads``, None: unset), not the 1 Ray
    gives a worker of a 1-CPU task, which would bind a server's own thread pools to it; and
    its load generator the driver's CPU priority (``nice``), as :func:`_as_driver` says."""
    os.environ.pop("OMP_NUM_THREADS", None)
    os.environ.update({"OMP_NUM_THREADS": threads} if threads is not None else {})
    _as_driver(nice)
    ids = tuple(str(i) for i in ray.get_gpu_ids()) if resource == "GPU" else ()
    started = time.time()
    events = job(ids)
    return ray.get_runtime_context().get_node_id(), ids, events, (started, time.time())


def _as_driver(nice: int) -> None:
    """Run this worker at the driver's niceness. Ray starts its workers at nice 15
    (``worker_niceness``), below its own daemons and the driver: a load generator there wakes
    late whenever they run, its sends lag and the knee it reads is the host's, and every
    server it starts is niced from 15. A cluster of this run's own starts its workers at the
    driver's niceness; a joined cluster's may refuse (raising a priority needs the
    privilege), and its steps then measure as its workers run."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        log.warning("ray.worker_niced", nice=os.getpriority(os.PRIO_PROCESS, 0), error=str(exc))


class RayPool:
    def __init__(
        self, *, address: str | None = None, gpus: int | None = None, resource: str = "GPU"
    ) -> None:
        """Join the cluster at ``address``, or start one on this machine with ``gpus`` of
        ``resource`` (None: the GPUs Ray finds)."""
        self.resource, self.owned = resource, address is None
        self._out: dict[Any, _Out] = {}
        if ray.is_initialized():
            self.owned = False
        elif address is not None:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        else:
            amount = {"num_gpus": gpus} if resource == "GPU" else {"resources": {resource: gpus}}
            ray.init(
                address="local",  # a new instance, even where `ray start` left one running
                _node_ip_address="127.0.0.1",
                include_dashboard=False,
                _system_config={"worker_niceness": os.getpriority(os.PRIO_PROCESS, 0)},
                log_to_driver=False,
                logging_level=logging.ERROR,
                **amount,
            )

    def total(self) -> int:
        """The cluster's GPUs on nodes alive now."""
        return int(ray.cluster_resources().get(self.resource, 0))

    def free(self) -> int:
        return self.total() - sum(p.gpus for p in self._out.values())

    def submit(self, key: str, job: Job, gpus: int) -> None:
        pg = placement_group([{self.resource: gpus, "CPU": 1}], strategy="STRICT_PACK")
        strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        held = (
            {"num_gpus": gpus} if self.resource == "GPU" else {"resources": {self.resource: gpus}}
        )
        ref = _run.options(num_cpus=1, scheduling_strategy=strategy, **held).remote(
            job,
            self.resource,
            os.environ.get("OMP_NUM_THREADS"),
            os.getpriority(os.PRIO_PROCESS, 0),
        )
        self._out[ref] = _Out(key, pg, gpus, time.monotonic())

    def wait(self) -> Landed:
        (ref,), _ = ray.wait(list(self._out), num_returns=1)
        placed = self._out.pop(ref)
        held_s = (time.monotonic() - placed.since) * placed.gpus
        try:
            node, ids, events, ran = ray.get(ref)
        except LOST as exc:
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("ray.step_lost", step=placed.key, why=why)
            return Landed(key=placed.key, node="?", lost=why, held_s=held_s)
        finally:
            remove_placement_group(placed.pg)
        return Landed(
            key=placed.key, node=node, gpu_ids=ids, events=tuple(events), held_s=held_s, ran_s=ran
        )

    def cancel(self) -> None:
        """Stop every step out. Removing a step's placement group makes Ray kill the worker
        running it, and the server's watchdog then stops the server (SIGTERM, then SIGKILL);
        a step still queued for its group's resources never starts and is cancelled. A step
        that runs is never ``ray.cancel``-ed: a cancel landing while its result is on its way
        back aborts the driver (Ray's core worker: "Tried to complete task that was not
        pending")."""
        refs = list(self._out)
        for ref in refs:
            remove_placement_group(self._out.pop(ref).pg)
        _, queued = ray.wait(refs, num_returns=len(refs), timeout=KILLED_S)
        for ref in queued:
            ray.cancel(ref)

    def close(self) -> None:
        if self.owned and ray.is_initialized():
            ray.shutdown()
