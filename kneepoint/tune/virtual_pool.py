"""GPUs simulated on the virtual clock: a step starts once its GPUs are free, runs at once
in-process, and lands at its start plus the device time its events carry, steps landing in that
order. It prices a run's scheduling on 8 or 64 GPUs in seconds of this machine's time
(benchmarks/scaleout.py, the tests of ``kneepoint.tune.dispatch``); Ray's pool runs the same
steps on real GPUs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kneepoint.records import Event, Landed
from kneepoint.tune.pool_loop import device_s

Job = Callable[[Sequence[str]], list[Event]]


@dataclass
class VirtualPool:
    gpus: int
    per_node: int = 8
    """GPUs a node has: a server's GPUs are all on one node."""
    clock_s: float = 0.0
    busy_s: float = 0.0
    """GPU-seconds spent measuring."""
    landings: list[tuple[str, float, float]] = field(default_factory=list)
    """(step, started at, landed at), in landing order."""
    _running: list[tuple[float, int, float, tuple[int, ...], Landed]] = field(default_factory=list)
    _queued: list[tuple[str, Job, int]] = field(default_factory=list)
    _count: int = 0

    def free(self) -> int:
        return self.gpus - sum(len(r[3]) for r in self._running) - sum(q[2] for q in self._queued)

    def submit(self, key: str, job: Job, gpus: int) -> None:
        self._queued.append((key, job, gpus))
        self._start_queued()

    def wait(self) -> Landed:
        lands_at, _, started, ids, landed = heapq.heappop(self._running)
        self.clock_s = lands_at
        self.busy_s += (lands_at - started) * len(ids)
        self.landings.append((landed.key, started, lands_at))
        self._start_queued()
        return landed

    def cancel(self) -> None:
        self._running.clear()
        self._queued.clear()

    def _start_queued(self) -> None:
        """Start each queued step, in order, whose GPUs one node has free."""
        for item in list(self._queued):
            key, job, gpus = item
            ids = self._free_on_one_node(gpus)
            if ids is None:
                continue
            self._queued.remove(item)
            events = job(tuple(str(i) for i in ids))
            spent = device_s(events)
            node = f"node-{ids[0] // self.per_node}"
            landed = Landed(key=key, node=node, gpu_ids=tuple(map(str, ids)), events=tuple(events))
            self._count += 1
            heapq.heappush(
                self._running, (self.clock_s + spent, self._count, self.clock_s, ids, landed)
            )

    def _free_on_one_node(self, gpus: int) -> tuple[int, ...] | None:
        held = {i for r in self._running for i in r[3]}
        for node in range(0, self.gpus, self.per_node):
            free = [i for i in range(node, min(node + self.per_node, self.gpus)) if i not in held]
            if len(free) >= gpus:
                return tuple(free[:gpus])
        return None
