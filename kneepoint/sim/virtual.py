"""Load points on the virtual clock: planned requests in, client-side records out.

The in-process twin of sending the same plan to a server over HTTP: every planned request is
submitted at its scheduled time, and what a streaming client would have seen (one chunk per
``stream_interval`` tokens, the usage counts, errors) comes back as ``RequestRecord``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.load import PlannedRequest
from kneepoint.records import RequestRecord
from kneepoint.sim.attribution import Attribution
from kneepoint.sim.closed_loop import ClosedLoop
from kneepoint.sim.deployment import Serving
from kneepoint.sim.engine import Arrival, SimRun
from kneepoint.sim.frontend import FrontEnd
from kneepoint.sim.request import SimRequest


@dataclass(frozen=True, slots=True)
class VirtualLoad:
    """The client's view of a load point, and the engine's run behind it."""

    records: tuple[RequestRecord, ...]
    run: SimRun

    def truth(self, start_s: float, end_s: float) -> Attribution:
        return self.run.truth(start_s, end_s)


def run_plan(
    engine: Serving,
    plan: Sequence[PlannedRequest],
    timeout_s: float | None = None,
    request_timeout_s: float | None = None,
    max_concurrency: int | None = None,
) -> VirtualLoad:
    """Send the plan to the engine; requests not done ``timeout_s`` after the last scheduled
    send are cut off, and any not done ``request_timeout_s`` after its own scheduled time is
    recorded as timed out (as the HTTP client gives up on it). A plan with sessions, or a
    client capped at ``max_concurrency`` in flight, waits on answers (``closed_loop``)."""
    if max_concurrency is not None or any(p.after is not None for p in plan):
        return _run_closed(engine, plan, timeout_s, request_timeout_s, max_concurrency)
    arrivals = [Arrival(p.at_s, p.prompt, p.max_tokens, p.traffic_class) for p in plan]
    until = (max(p.at_s for p in plan) + timeout_s) if plan and timeout_s else float("inf")
    start = engine.now_s
    shifted = _shifted(arrivals, start)
    run = engine.run(shifted, until_s=start + until)
    interval = engine.resolved.stream_interval
    position = {id(a): i for i, a in enumerate(shifted)}
    requests = {position[id(a)]: req for a, req in run.submitted}
    rejected = {position[id(a)]: msg for a, msg in run.rejected}
    drafted = engine.resolved.speculative_tokens > 0
    records = []
    for i, p in enumerate(plan):
        req = requests.get(i)
        front = engine.frontend_for(req) if req is not None else None
        records.append(
            _record(
                p,
                start,
                req,
                rejected.get(i),
                interval,
                frontend=front,
                request_timeout_s=request_timeout_s,
                drafted=drafted,
            )
        )
    return VirtualLoad(tuple(records), run)


def _run_closed(
    engine: Serving,
    plan: Sequence[PlannedRequest],
    timeout_s: float | None,
    request_timeout_s: float | None,
    max_concurrency: int | None,
) -> VirtualLoad:
    # Each request's own time limit bounds the run: a session's last turn goes out long
    # after the plan's last first turn, so no cut after the last send can be set beforehand.
    # The client's own limit wins over the point's cut: the smaller of the two would cut a
    # capped client's requests before the study's limit, and turn a cache-bound mix's queue
    # into timeouts read as a bandwidth wall.
    limit = request_timeout_s or timeout_s
    if limit is None:
        raise ValueError("a client that waits on answers needs a time limit per request")
    start = engine.now_s
    client = ClosedLoop(plan, start, max_concurrency=max_concurrency, timeout_s=limit)
    run = engine.run(client)
    rejected = {a.key: msg for a, msg in run.rejected}
    interval = engine.resolved.stream_interval
    drafted = engine.resolved.speculative_tokens > 0
    records = []
    for p in plan:
        outcome = client.outcomes[p.index]
        if outcome.dropped:
            continue
        due = (outcome.due_s if outcome.due_s is not None else start + p.at_s) - start
        sent = outcome.sent_s - start if outcome.sent_s is not None else due
        base = {
            "index": p.index,
            "traffic_class": p.traffic_class,
            "scheduled_s": due,
            "sent_s": sent,
            "prompt_tokens": len(p.prompt),
            "slot_wait_s": sent - due,
        }
        req = outcome.req
        if p.index in rejected:
            records.append(RequestRecord(**base, error=f"HTTP 400: {rejected[p.index]}"))
        elif outcome.error is not None or req is None or req.finish_s is None:
            records.append(RequestRecord(**base, error=outcome.error or "timed out"))
        else:
            times = chunk_times(req.token_times_s, interval, drafted=drafted)
            frontend = engine.frontend_for(req)
            chunks = frontend.seen_all(times, start)
            end = frontend.seen_at(req.finish_s) - start
            records.append(
                RequestRecord(
                    **base, chunk_times_s=tuple(chunks), end_s=end, output_tokens=req.num_output
                )
            )
    return VirtualLoad(tuple(records), run)


def chunk_times(
    token_times_s: Sequence[float], stream_interval: int, *, drafted: bool = False
) -> list[float]:
    """When a streaming client sees chunks: vLLM sends the first token at once, then holds
    tokens back until ``stream_interval`` are unsent, and flushes the rest at the end.
    ``drafted``: a step may make several tokens (a speculative draft's accepted ones, all at
    the step's end), and they go out together, as one chunk."""
    if not drafted:
        sent = list(token_times_s[::stream_interval])
        if token_times_s and (len(token_times_s) - 1) % stream_interval:
            sent.append(token_times_s[-1])
        return sent
    sent, unsent, last = [], 0, len(token_times_s) - 1
    for i, at in enumerate(token_times_s):
        unsent += 1
        if i < last and token_times_s[i + 1] == at:
            continue  # the step made more tokens than this one
        if not sent or unsent >= stream_interval or i == last:
            sent.append(at)
            unsent = 0
    return sent


def _shifted(arrivals: list[Arrival], start: float) -> list[Arrival]:
    if start == 0.0:
        return arrivals
    return [Arrival(a.at_s + start, a.prompt, a.max_tokens, a.traffic_class) for a in arrivals]


def _record(
    planned: PlannedRequest,
    start: float,
    req: SimRequest | None,
    rejection: str | None,
    stream_interval: int,
    *,
    frontend: FrontEnd | None,
    request_timeout_s: float | None = None,
    drafted: bool = False,
) -> RequestRecord:
    base = {
        "index": planned.index,
        "traffic_class": planned.traffic_class,
        "scheduled_s": planned.at_s,
        "sent_s": planned.at_s,
        "prompt_tokens": len(planned.prompt),
    }
    if rejection is not None:
        return RequestRecord(**base, error=f"HTTP 400: {rejection}")
    if req is None or req.finish_s is None or frontend is None:
        return RequestRecord(**base, error="timed out")
    end_s = frontend.seen_at(req.finish_s) - start  # the client sees the last token when it is sent
    if request_timeout_s is not None and end_s - planned.at_s > request_timeout_s:
        return RequestRecord(
            **base, error=f"timed out {request_timeout_s:g} s after its scheduled time"
        )
    times = req.token_times_s
    chunks = frontend.seen_all(chunk_times(times, stream_interval, drafted=drafted), start)
    return RequestRecord(
        **base,
        chunk_times_s=tuple(chunks),
        end_s=end_s,
        output_tokens=req.num_output,
    )
