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
        # through the API server, in order: when each reaches the engine, when it was picked up
        self._handed: deque[tuple[float, float, Arrival]] = deque()
        self.over = False

    def turn(self) -> bool:
        """One turn of the loop; False once the run is over."""
        engine, client, handed = self.engine, self.client, self._handed
        if self.over or engine.now_s >= self.until_s or client.done:
            return self._end()
        self._take_in()
        while handed and handed[0][0] <= engine.now_s:
            reached_s, picked_s, arrival = handed.popleft()
            self._submit_or_reject(arrival, picked_s, reached_s)
        stepped = engine.step() if engine.busy else None
        if stepped is not None:
            # Requests that arrived during the step are taken in before its output.
            self._take_in()
            interval = engine.resolved.stream_interval
            record = stepped.record
            chunks = record.num_samples / interval
            if engine.frontend.stream(engine.now_s, chunks, record.cost.wall_s):
                record = record._replace(frontend_held=True)
            self.run.steps.append(record)
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
            picked = engine.frontend.pick_up(arrival.at_s)
            self._handed.append((picked + engine.frontend.latency_s, picked, arrival))

    def _submit_or_reject(self, arrival: Arrival, picked_s: float, reached_s: float) -> None:
        try:
            req = self.engine.submit(arrival)
        except RequestRejectedError as exc:
            self.run.rejected.append((arrival, str(exc)))
            self.client.rejected(arrival, self.engine.now_s)
        else:
            # the server's arrival stamp (its TTFT counts from there): it arrived mid-step,
            # and the engine sees it after
            req.arrival_s = picked_s
            req.queued_s = reached_s  # mid-step: a step scheduled before cannot take it
            self.run.submitted.append((arrival, req))
