"""One request sent on schedule and streamed: what it left, as plain values.

The request goes to ``/v1/completions`` as token ids (``kneepoint.probes.client.openai_wire``), with
``ignore_eos`` unless the workload lets a real model stop at its end-of-sequence token, under
the load's cap on requests in flight if it has one, and is cut ``request_timeout_s`` after its
scheduled time. Errors and timeouts are recorded, never raised. What it leaves until its load
point ends is a plain tuple (``Outcome``), turned into a ``RequestRecord`` at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx

from kneepoint.load import PlannedRequest
from kneepoint.probes.client import http1
from kneepoint.probes.client.openai_wire import Stream, error_message, request_body
from kneepoint.probes.runtime import Clock
from kneepoint.records import RequestRecord

_DRAIN_GRACE_S = 0.5

Client = httpx.AsyncClient | http1.Client

# What a finished request leaves until its load point ends: plain values in a plain tuple,
# which the garbage collector stops tracking. Records, or the tasks that made them, would all
# be walked by every full collection: once a load point has sent a few thousand requests that
# stalls the loop for tens of milliseconds, and nothing is sent meanwhile.
Outcome = tuple[
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
    temperature: float | None = None
    """Sampling temperature sent (None: the server's default)."""
    api_key: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` (None: no key); kept out of every repr."""


async def _send(
    client: Client,
    planned: PlannedRequest,
    options: LoadOptions,
    clock: Clock,
    stream: Stream,
) -> None:
    """Send one request and read its stream into ``stream``."""
    stream.sent_s = clock.now()
    body = request_body(planned, options.model, options.ignore_eos, options.temperature)
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


async def send_one(
    client: Client,
    planned: PlannedRequest,
    due_s: float,
    options: LoadOptions,
    *,
    clock: Clock,
    slots: asyncio.Semaphore | None,
    heard: Callable[[], None] | None = None,
) -> Outcome:
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


def _outcome(planned: PlannedRequest, due_s: float, stream: Stream, waited: float) -> Outcome:
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


def record_of(outcome: Outcome) -> RequestRecord:
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


def _loop_time(perf_deadline: float) -> float:
    """A perf_counter deadline on the event loop's clock."""
    return asyncio.get_running_loop().time() + (perf_deadline - time.perf_counter())
