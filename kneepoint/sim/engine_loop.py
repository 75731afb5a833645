"""One simulated engine's main loop, one turn at a time: take in what the client sent, run a
step, tell the client what ended. ``SimEngine.run`` turns it to the end; data-parallel
replicas (``kneepoint.sim.replicas``) turn several of them in time order.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from kneepoint.sim.client import Arrival, Client, RequestRejectedError

if TYPE_CHECKING:
    from kneepoint.sim.engine import SimEngine, SimRun


class EngineLoop:
    """A run of ``engine`` fed by ``client`` until ``until_s`` (or the client is done)."""

    def __init__(self, engine: SimEngine, client: Client, run: SimRun, until_s: float) -> None:
        self.engine, self.client, self.run, self.until_s = engine, client, run, until_s
        self._handed: deque[tuple[float, Arrival]] = deque()  # through the API server, in order
        self.over = False

    def turn(self) -> bool:
        """One turn of the loop; False once the run is over."""
        engine, client, handed = self.engine, self.client, self._handed
        if self.over or engine.now_s >= self.until_s or client.done:
            return self._end()
        self._take_in()
        while handed and handed[0][0] <= engine.now_s:
            self._submit_or_reject(handed.popleft()[1])
        stepped = engine.step() if engine.busy else None
        if stepped is not None:
            # Requests that arrived during the step are taken in before its output.
            self._take_in()
            interval = engine.resolved.stream_interval
            engine.frontend.stream(engine.now_s, stepped.record.num_samples / interval)
            self.run.steps.append(stepped.record)
            self.run.finished += stepped.finished
            for req in stepped.finished:
                client.finished(req, engine.frontend.seen_at(engine.now_s))
        elif (loaded := engine.scheduler.loads.next_s()) is not None and (
            not handed or loaded <= handed[0][0]
        ):  # idle until a prefix loading from host memory is in
            engine.now_s = max(engine.now_s, loaded)
        elif handed:  # idle until the next request reaches the engine
            engine.now_s = max(engine.now_s, handed[0][0])
        elif (due := client.next_at()) is not None:
            engine.now_s = max(engine.now_s, due)
        else:
            return self._end()
        return True

    def _end(self) -> bool:
        if not self.over:
            self.over = True
            self.engine.scheduler.sync()
        return False

    def _take_in(self) -> None:
        """Queue on the API server every arrival up to now."""
        engine = self.engine
        for arrival in self.client.take(engine.now_s):
            self._handed.append((engine.frontend.intake(arrival.at_s), arrival))

    def _submit_or_reject(self, arrival: Arrival) -> None:
        try:
            req = self.engine.submit(arrival)
        except RequestRejectedError as exc:
            self.run.rejected.append((arrival, str(exc)))
            self.client.rejected(arrival, self.engine.now_s)
        else:
            req.arrival_s = arrival.at_s  # it arrived mid-step; the engine sees it after
            self.run.submitted.append((arrival, req))
