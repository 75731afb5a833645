"""What a fresh server is sent before its first load point, and thrown away.

Two things: every shared document of the workload's corpus once, the least popular first
(so that a prefix cache that cannot keep them all keeps the most popular), and a burst of the
workload's own requests. The corpus part puts a fresh server where a server that has been
serving the workload for a while is: a screen on a fresh server otherwise starts with an
empty prefix cache against an incumbent read from a knee search whose earlier points warmed
its own (rag, 200 zipf documents: a fresh engine failed 34 req/s at TTFT p99 2.8 s where
one warmed by the search's lower points met 38 at 955 ms, tests/fixtures/real/README.md).
The burst takes a fresh vLLM's one-off costs (kernels compiled or tuned for new shapes,
memory pools grown) out of the first point: on the CPU build the first point after each
start read a TTFT p99 of 808-1,326 ms where the same rate later on the same server read
49 ms (tests/fixtures/real/cpu-tiny-llama).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kneepoint.load.plan import plan_requests
from kneepoint.load.request import Documents, PlannedRequest
from kneepoint.records import TraceEntry, Workload

WARMUP_REQUESTS = 16
"""The burst: enough to run batches of every size up to 16 in prefill and decode."""
BURST_RPS = 1000.0
"""The documents' pace: one a millisecond, in order (the burst then goes at once)."""
SALT = "warmup/"
"""The warm-up's own prompts are its own: no measured point's repeats one."""


def warmup_plan(
    workload: Workload, vocab_size: int, trace: Sequence[TraceEntry] = ()
) -> list[PlannedRequest]:
    """Each document of the workload's prefix groups once (its tokens, one token of the
    warm-up's own, one token out), ``1 / BURST_RPS`` apart, then ``WARMUP_REQUESTS`` of the
    workload's requests (a trace workload's from ``trace``) at once."""
    docs = Documents(workload.prefix_groups, workload.seed, vocab_size)
    planned: list[PlannedRequest] = []
    for group in workload.prefix_groups:
        readers = [c.name for c in workload.classes if c.prefix_group == group.name]
        reader = readers[0] if readers else workload.classes[0].name
        for doc_id, tokens in docs.least_popular_first(group.name):
            prompt = tokens + docs.unique(f"{SALT}{doc_id}", 1)
            planned.append(
                PlannedRequest(len(planned), len(planned) / BURST_RPS, reader, prompt, 1, doc_id)
            )
    # Planned at one second's worth, then sent at once: a plan at the burst's own rate draws
    # the sessions a conversational workload has under way at 1,000 req/s (~20,000 of
    # multiturn-chat's, 35 s of drawing), to send 16 turns.
    burst = plan_requests(
        workload,
        float(WARMUP_REQUESTS),
        num_requests=WARMUP_REQUESTS,
        seed=workload.seed,
        vocab_size=vocab_size,
        trace=trace,
        salt=SALT,
    )
    start = len(planned) / BURST_RPS
    return planned + [_at_once(p, len(planned), start) for p in burst]


def _at_once(p: PlannedRequest, by: int, start_s: float) -> PlannedRequest:
    """``p`` renumbered after the documents and due at ``start_s`` (a later turn of a
    session still goes only once the turn it follows has ended)."""
    after = None if p.after is None else p.after + by
    last = None if p.last_s is None else p.last_s + start_s
    return dataclasses.replace(p, index=p.index + by, at_s=start_s, after=after, last_s=last)
