"""The load generator: planned requests sent on schedule, streamed, recorded.

Each planned request is sent at its scheduled time whatever happened to the ones before it
(open loop), optionally under a cap on requests in flight; a session's later turn waits for
the answer before it and the think time (``PlannedRequest.after``), and latency counts from
that moment. Every response is streamed and recorded as a ``RequestRecord``: scheduled,
actual send, each token-carrying chunk and end times, token counts from the server's
``usage``, and any error (``kneepoint.probes.client.one_request``: one request's part). Latency
counts from the scheduled time; the client's own lag is kept so a load point the client
could not keep up with is flagged, not blamed on the server.

Requests travel on the lean HTTP/1.1 client of ``kneepoint.probes.client.http1`` (one core
then keeps a schedule of a few thousand short requests a second), or on httpx where that
client cannot go (a scripted transport, a proxy). Either way a connection carries request
after request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
from collections.abc import Callable, Iterator, Sequence

import httpx

from kneepoint.load import PlannedRequest
from kneepoint.probes.client import http1
from kneepoint.probes.client.one_request import Client, LoadOptions, Outcome, record_of, send_one
from kneepoint.probes.client.openai_wire import bearer
from kneepoint.probes.runtime import Clock
from kneepoint.records import RequestRecord

__all__ = ["LoadOptions", "run_load"]

# Where httpx must carry the requests (a scripted transport, a proxy): httpcore's pool scans
# every open connection for each request it places, so one pool with hundreds of connections
# costs more per request than the request itself; requests are dealt round-robin to several
# clients, each with a small pool, instead.
_SHARDS = 16


async def _session(
    client: Client,
    first: PlannedRequest,
    due_s: float,
    followers: dict[int, PlannedRequest],
    options: LoadOptions,
    *,
    begin_s: float,
    clock: Clock,
    slots: asyncio.Semaphore | None,
    heard: Callable[[], None] | None,
) -> tuple[Outcome, ...]:
    """A session's turns one after another: each next one ``think_s`` after the client saw
    the last token of the one before; none after one that failed (recorded as not sent)."""

    async def send(planned: PlannedRequest, due_s: float) -> Outcome:
        return await send_one(
            client, planned, due_s, options, clock=clock, slots=slots, heard=heard
        )

    outcomes = [await send(first, due_s)]
    planned: PlannedRequest | None = first
    while planned is not None and (follower := followers.get(planned.index)) is not None:
        _, _, _, _, _, end, _, _, error, _ = outcomes[-1]
        if error is not None or end is None:
            failed = planned.index, begin_s
            return (*outcomes, *_abandoned(follower, followers, failed, clock.now()))
        due_s = end + follower.think_s
        if follower.last_s is not None and due_s > begin_s + follower.last_s:
            break  # due after the point's span: not sent, not recorded
        delay = due_s - clock.now()
        if delay > 0:
            await asyncio.sleep(delay)
        outcomes.append(await send(follower, due_s))
        planned = follower
    return tuple(outcomes)


def _abandoned(
    planned: PlannedRequest,
    followers: dict[int, PlannedRequest],
    failed: tuple[int, float],
    at_s: float,
) -> list[Outcome]:
    """The rest of a session whose request ``failed`` (its index; the load's start) ended
    it, up to the point's span."""
    index, begin_s = failed
    error = f"not sent: request {index} of its session failed"
    left: list[Outcome] = []
    next_one: PlannedRequest | None = planned
    while next_one is not None:
        at_s += next_one.think_s
        if next_one.last_s is not None and at_s > begin_s + next_one.last_s:
            break
        index, cls = next_one.index, next_one.traffic_class
        left.append((index, cls, at_s, at_s, (), None, 0, 0, error, 0.0))
        next_one = followers.get(next_one.index)
    return left


class _InFlight:
    """The requests under way, and what those that finished left (their tasks let go)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[tuple[Outcome, ...]]] = set()
        self.outcomes: list[Outcome] = []
        self.failure: BaseException | None = None

    def add(self, task: asyncio.Task[tuple[Outcome, ...]]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[tuple[Outcome, ...]]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            self.failure = self.failure or asyncio.CancelledError()
        elif (exc := task.exception()) is not None:
            self.failure = self.failure or exc
        else:
            self.outcomes.extend(task.result())

    async def records(self) -> list[RequestRecord]:
        """Every request's record once all have finished, in plan order; what escaped a
        request (a bug: failures are recorded) is raised here, as ``gather`` would."""
        try:
            while self.tasks:
                await asyncio.wait(set(self.tasks))
        except asyncio.CancelledError:
            for task in self.tasks:
                task.cancel()
            raise
        if self.failure is not None:
            raise self.failure
        return sorted(map(record_of, self.outcomes), key=lambda r: r.index)


def _clients(
    url: str, options: LoadOptions, transport: httpx.AsyncBaseTransport | None
) -> list[Client]:
    """The lean client where it can carry the requests (a fifth of httpx's CPU per request
    or less, which decides the highest rate one core keeps on schedule), else httpx."""
    if transport is None and http1.direct_url(url):
        return [http1.Client(url, headers=bearer(options.api_key))]
    cap = options.max_concurrency
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    timeout = httpx.Timeout(options.request_timeout_s)
    context = ssl.create_default_context()  # one for all shards: each costs tens of ms
    headers = bearer(options.api_key)
    return [
        httpx.AsyncClient(
            base_url=url,
            timeout=timeout,
            limits=limits,
            transport=transport,
            verify=context,
            headers=headers,
        )
        for _ in range(1 if cap else _SHARDS)
    ]


@contextlib.contextmanager
def _collector_spared() -> Iterator[None]:
    """Set what the process holds already (every module it imported) aside from the garbage
    collector while the load runs: a full collection walks all of it, tens of milliseconds in
    which the loop sends nothing. Collection resumes on it afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def run_load(
    url: str,
    plan: Sequence[PlannedRequest],
    options: LoadOptions,
    *,
    clock: Clock | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    heard: Callable[[], None] | None = None,
) -> list[RequestRecord]:
    """Send the plan to the server at ``url``; one record per planned request, in plan order.
    Scheduled times are on ``clock``: the plan's offsets from the moment sending starts.

    ``clock`` lets telemetry samplers share the load point's origin; ``transport`` swaps the
    network (tests use it to script failures); ``heard`` is called whenever a request that
    the server answered with tokens ends (a sign of life, however slow its ``/metrics``)."""
    clock = clock or Clock.start()
    cap = options.max_concurrency
    slots = asyncio.Semaphore(cap) if cap else None
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(_collector_spared())
        clients = _clients(url, options, transport)
        for client in clients:
            await stack.enter_async_context(client)
        shards = len(clients)
        in_flight = _InFlight()
        followers = {p.after: p for p in plan if p.after is not None}
        firsts = sorted((p for p in plan if p.after is None), key=lambda p: p.at_s)
        begin = clock.now()  # the schedule starts once the clients are ready
        for n, planned in enumerate(firsts):
            due = begin + planned.at_s
            delay = due - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            client = clients[n % shards]
            task = _session(
                client,
                planned,
                due,
                followers,
                options,
                begin_s=begin,
                clock=clock,
                slots=slots,
                heard=heard,
            )
            in_flight.add(asyncio.create_task(task))
        return await in_flight.records()
