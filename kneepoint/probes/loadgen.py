"""The load generator: planned requests sent on schedule, streamed, recorded.

Each planned request is sent at its scheduled time whatever happened to the ones before it
(open loop), optionally under a cap on requests in flight; a session's later turn waits for
the answer before it and the think time (``PlannedRequest.after``), and latency counts from
that moment. Every response is streamed and
recorded as a ``RequestRecord``: scheduled, actual send, each token-carrying chunk and end
times, token counts from the server's ``usage``, and any error. Errors and timeouts are
recorded, never raised. Latency counts from the scheduled time; the client's own lag is kept
so a load point the client could not keep up with is flagged, not blamed on the server.

Prompts go to ``/v1/completions`` as token ids (``kneepoint.probes.openai_wire``), with
``ignore_eos`` unless the workload lets a real model stop at its end-of-sequence token.

Requests travel on the lean HTTP/1.1 client of ``kneepoint.probes.http1`` (one core then keeps
a schedule of a few thousand short requests a second), or on httpx where that client cannot
go (a scripted transport, a proxy). Either way a connection carries request after request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field

import httpx

from kneepoint.load.plan import PlannedRequest
from kneepoint.probes import http1
from kneepoint.probes.clock import Clock
from kneepoint.probes.openai_wire import Stream, bearer, error_message, request_body
from kneepoint.records.measure import RequestRecord

# Where httpx must carry the requests (a scripted transport, a proxy): httpcore's pool scans
# every open connection for each request it places, so one pool with hundreds of connections
# costs more per request than the request itself; requests are dealt round-robin to several
# clients, each with a small pool, instead.
_SHARDS = 16
_DRAIN_GRACE_S = 0.5

_Client = httpx.AsyncClient | http1.Client

# What a finished request leaves until its load point ends: plain values in a plain tuple,
# which the garbage collector stops tracking. Records, or the tasks that made them, would all
# be walked by every full collection: once a load point has sent a few thousand requests that
# stalls the loop for tens of milliseconds, and nothing is sent meanwhile.
_Outcome = tuple[
    int, str, float, float, tuple[float, ...], float | None, int, int, str | None, float
]


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How to send: the served model name, limits, and where."""

    model: str
    request_timeout_s: float = 600.0
    """A request not finished this long after its scheduled time is cut off (recorded)."""
    max_concurrency: int | None = None
    """Cap on requests in flight; None: pure open loop."""
    ignore_eos: bool = True
    """Every answer runs to its max_tokens; false lets the model stop at EOS."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` (None: no key); kept out of every repr."""


async def _send(
    client: _Client,
    planned: PlannedRequest,
    options: LoadOptions,
    clock: Clock,
    stream: Stream,
) -> None:
    """Send one request and read its stream into ``stream``."""
    stream.sent_s = clock.now()
    body = request_body(planned, options.model, options.ignore_eos)
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            raw = await response.aread()
            try:
                detail = error_message(json.loads(raw))
            except ValueError:
                detail = raw.decode(errors="replace")[:300]
            stream.error = f"HTTP {response.status_code}: {detail}"
            return
        lines = response.aiter_lines()
        async for line in lines:
            stream.feed(line, clock.now())
            if stream.error or stream.done:
                break
        if stream.done:
            await _drain(lines)
    if not stream.done and stream.error is None:
        stream.error = "stream ended without [DONE]"


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read what follows ``[DONE]`` (the body's end): a connection closed with its response
    unread cannot be reused, and opening one per request costs more than the request. A
    server that holds the stream open after ``[DONE]`` gets a short grace, then is cut."""
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(_DRAIN_GRACE_S):
            async for _ in lines:
                pass


async def _one(
    client: _Client,
    planned: PlannedRequest,
    due_s: float,
    options: LoadOptions,
    *,
    clock: Clock,
    slots: asyncio.Semaphore | None,
    heard: Callable[[], None] | None = None,
) -> _Outcome:
    waited = 0.0
    stream = Stream(clock.now())
    deadline = clock.origin + due_s + options.request_timeout_s
    try:
        async with asyncio.timeout_at(_loop_time(deadline)):
            if slots is not None:
                before = clock.now()
                await slots.acquire()
                waited = clock.now() - before
            try:
                await _send(client, planned, options, clock, stream)
            finally:
                if slots is not None:
                    slots.release()
    except TimeoutError:
        if not stream.done:  # cut while reading past [DONE], the answer was whole
            stream.error = f"timed out {options.request_timeout_s:g} s after its scheduled time"
    except httpx.HTTPError as exc:
        stream.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except (ValueError, KeyError, TypeError) as exc:  # a malformed stream
        stream.error = f"bad stream: {exc}"
    if heard is not None and stream.chunk_times:
        heard()
    return _outcome(planned, due_s, stream, waited)


def _outcome(planned: PlannedRequest, due_s: float, stream: Stream, waited: float) -> _Outcome:
    end = stream.end_s if stream.error is None else None
    return (
        planned.index,
        planned.traffic_class,
        due_s,
        stream.sent_s,
        tuple(stream.chunk_times),
        end,
        stream.prompt_tokens,
        stream.output_tokens,
        stream.error,
        waited,
    )


def _record(outcome: _Outcome) -> RequestRecord:
    index, traffic_class, due, sent, chunks, end, prompt, output, error, waited = outcome
    return RequestRecord(
        index=index,
        traffic_class=traffic_class,
        scheduled_s=due,
        sent_s=sent,
        chunk_times_s=chunks,
        end_s=end,
        prompt_tokens=prompt,
        output_tokens=output,
        error=error,
        slot_wait_s=waited,
    )


async def _session(
    client: _Client,
    first: PlannedRequest,
    due_s: float,
    followers: dict[int, PlannedRequest],
    options: LoadOptions,
    *,
    begin_s: float,
    clock: Clock,
    slots: asyncio.Semaphore | None,
    heard: Callable[[], None] | None,
) -> tuple[_Outcome, ...]:
    """A session's turns one after another: each next one ``think_s`` after the client saw
    the last token of the one before; none after one that failed (recorded as not sent)."""

    async def send(planned: PlannedRequest, due_s: float) -> _Outcome:
        return await _one(client, planned, due_s, options, clock=clock, slots=slots, heard=heard)

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
) -> list[_Outcome]:
    """The rest of a session whose request ``failed`` (its index; the load's start) ended
    it, up to the point's span."""
    index, begin_s = failed
    error = f"not sent: request {index} of its session failed"
    left: list[_Outcome] = []
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
        self.tasks: set[asyncio.Task[tuple[_Outcome, ...]]] = set()
        self.outcomes: list[_Outcome] = []
        self.failure: BaseException | None = None

    def add(self, task: asyncio.Task[tuple[_Outcome, ...]]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[tuple[_Outcome, ...]]) -> None:
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
        return sorted(map(_record, self.outcomes), key=lambda r: r.index)


def _clients(
    url: str, options: LoadOptions, transport: httpx.AsyncBaseTransport | None
) -> list[_Client]:
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


def _loop_time(perf_deadline: float) -> float:
    """A perf_counter deadline on the event loop's clock."""
    return asyncio.get_running_loop().time() + (perf_deadline - time.perf_counter())


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
