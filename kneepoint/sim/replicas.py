"""Data-parallel replicas on the virtual clock: ``--data-parallel-size N`` engines, each a whole
copy of the model on its own GPUs, behind vLLM's internal load balancer and one pool of API
servers.

The balancer is vLLM 0.32's (``DPLBAsyncMPClient.get_core_engine_for_request`` in
vllm/v1/engine/core_client.py): each request goes to the engine with the lowest score, the
larger of its requests in flight from this client and its waiting + running count, plus
6 x waiting x (KV usage - 0.5) where its pool is over half full; the scan starts one engine
further on for each request, so ties go round. The API servers (``vllm serve`` defaults
``--api-server-count`` to the DP size) serve every engine; each engine streams through its
share of them, as the processes split the connections evenly.

The engines run in time order: the one furthest behind turns next, and requests are routed
when the slowest engine has reached their arrival, so a routing decision reads every engine's
state no later than a step after the arrival (vLLM's own reads a snapshot up to 100 ms old).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from kneepoint.sim.client import Arrival, Client, Scheduled
from kneepoint.sim.engine import SimEngine, SimRun, StepRecord
from kneepoint.sim.engine_loop import EngineLoop
from kneepoint.sim.frontend import FrontEnd
from kneepoint.sim.request import SimRequest

KV_PENALTY = 6.0
"""vLLM 0.32's balancer: waiting requests weigh 6 x (KV usage - 0.5) each on an engine whose
pool is over half full (a queue on a KV-bound engine drains slowly)."""


class Replicas:
    """``len(engines)`` engines of one configuration behind one balancer and front-end."""

    def __init__(self, engines: Sequence[SimEngine]) -> None:
        first = engines[0]
        self.engines = tuple(engines)
        self.gpu, self.model = first.gpu, first.model
        self.resolved, self.memory, self.roofline = first.resolved, first.memory, first.roofline
        self._ran: dict[int, SimEngine] = {}  # a request's id -> the engine that ran it
        for index, engine in enumerate(self.engines):
            engine.index = index

    def frontend_for(self, req: SimRequest) -> FrontEnd:
        """The API server share that streamed ``req``."""
        return self._ran[id(req)].frontend

    def frontend_busy_pct(self, start_s: float, end_s: float) -> float | None:
        """The API servers' CPU over a window, on average."""
        busy = [e.frontend.busy_pct(start_s, end_s) for e in self.engines]
        known = [b for b in busy if b is not None]
        return sum(known) / len(known) if known else None

    @property
    def replicas(self) -> int:
        return len(self.engines)

    @property
    def now_s(self) -> float:
        """When the last engine's run ended: a next run starts after every engine's."""
        return max(engine.now_s for engine in self.engines)

    def abort_all(self) -> None:
        for engine in self.engines:
            engine.abort_all()

    def run(self, arrivals: Iterable[Arrival] | Client, until_s: float = float("inf")) -> SimRun:
        """As ``SimEngine.run``, over every replica; the run's steps are every engine's, each
        marked with its engine, in time order."""
        client = arrivals if isinstance(arrivals, Client) else Scheduled(arrivals)
        start = self.now_s
        for engine in self.engines:
            engine.now_s = start
        router = _Balancer(client, self.engines)
        runs = [SimRun() for _ in self.engines]
        loops = [
            EngineLoop(e, _Routed(router, i), runs[i], until_s) for i, e in enumerate(self.engines)
        ]
        router.loops = loops
        while live := [loop for loop in loops if not loop.over]:
            # the engine furthest behind turns; on a tie, one with work before an idle one
            turn = min(live, key=lambda loop: (loop.engine.now_s, not loop.engine.busy))
            turn.turn()
        for engine, run in zip(self.engines, runs, strict=True):
            self._ran.update((id(req), engine) for _, req in run.submitted)
        return _merged(runs)


class _Balancer:
    """The global client's arrivals, each routed to one engine as vLLM's balancer would."""

    def __init__(self, client: Client, engines: Sequence[SimEngine]) -> None:
        self.client, self.engines = client, engines
        self.queues: list[deque[Arrival]] = [deque() for _ in engines]
        self.in_flight = [0] * len(engines)
        self.loops: list[EngineLoop] = []
        self._start = 0

    def horizon(self) -> float:
        """The slowest live engine's time: what is routed is due by then."""
        return min(loop.engine.now_s for loop in self.loops if not loop.over)

    def route(self, now_s: float) -> None:
        for arrival in self.client.take(min(now_s, self.horizon())):
            index = self._pick()
            self.queues[index].append(arrival)
            self.in_flight[index] += 1

    def _pick(self) -> int:
        best, least = 0, float("inf")
        count = len(self.engines)
        for offset in range(count):
            index = (self._start + offset) % count
            if self.loops[index].over:
                continue
            scheduler = self.engines[index].scheduler
            waiting = len(scheduler.waiting)
            score = float(max(self.in_flight[index], waiting + len(scheduler.running)))
            if waiting:
                usage = self.engines[index].kv.usage
                score += waiting * KV_PENALTY * max(0.0, usage - 0.5)
            if score < least:
                best, least = index, score
        self._start = (self._start + 1) % count
        return best

    def busy_elsewhere(self, index: int) -> float | None:
        """The earliest time of another live engine with work: an idle engine waits for it
        (its end may send a session's next turn)."""
        times = [
            loop.engine.now_s
            for i, loop in enumerate(self.loops)
            if i != index and not loop.over and loop.engine.busy
        ]
        return min(times, default=None)


class _Routed(Client):
    """One engine's side of the balancer."""

    def __init__(self, balancer: _Balancer, index: int) -> None:
        self._balancer, self._index = balancer, index

    @property
    def done(self) -> bool:
        return self._balancer.client.done and not self._balancer.queues[self._index]

    def take(self, now_s: float) -> list[Arrival]:
        self._balancer.route(now_s)
        queue = self._balancer.queues[self._index]
        taken = list(queue)
        queue.clear()
        return taken

    def next_at(self) -> float | None:
        due = self._balancer.client.next_at()
        other = self._balancer.busy_elsewhere(self._index)
        known = [t for t in (due, other) if t is not None]
        return min(known, default=None)

    def finished(self, req: SimRequest, seen_s: float) -> None:
        self._balancer.in_flight[self._index] -= 1
        self._balancer.client.finished(req, seen_s)

    def rejected(self, arrival: Arrival, at_s: float) -> None:
        self._balancer.in_flight[self._index] -= 1
        self._balancer.client.rejected(arrival, at_s)


def _merged(runs: Sequence[SimRun]) -> SimRun:
    merged = SimRun()
    for run in runs:
        merged.finished += run.finished
        merged.submitted += run.submitted
        merged.rejected += run.rejected
    steps: list[StepRecord] = [step for run in runs for step in run.steps]
    merged.steps = sorted(steps, key=lambda step: step.start_s)
    return merged
