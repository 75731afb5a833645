"""A server's first requests, sent and thrown away before its first load point.

A freshly started vLLM pays one-off costs on its first requests (kernels compiled or tuned for
new shapes, memory pools grown): on the CPU build the first point after each start read a
TTFT p99 of 808-1,326 ms where the same rate later on the same server read 49 ms (the
2026-11-25 CPU recordings, tests/fixtures/real/cpu-tiny-llama). A burst of the workload's own
requests, at once, takes those costs out of the first measured point.
"""

from __future__ import annotations

import structlog

from kneepoint.load.plan import plan_requests
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.interrupts import run_async
from kneepoint.records.study import StudySpec

log = structlog.get_logger(__name__)
WARMUP_REQUESTS = 16
"""Enough to run batches of every size up to 16 in prefill and decode."""
_BURST_RPS = 1000.0


def warm_up(url: str, study: StudySpec, options: LoadOptions) -> None:
    """Send ``WARMUP_REQUESTS`` of the study's workload at once and wait for them; what they
    measured is discarded (a server that fails them will fail the first point too)."""
    plan = plan_requests(
        study.workload,
        _BURST_RPS,
        num_requests=WARMUP_REQUESTS,
        seed=study.workload.seed,
        vocab_size=study.model.vocab_size,
        salt="warmup/",
    )
    records = run_async(run_load(url, plan, options))
    log.info("server.warmed", requests=len(records), failed=sum(not r.ok for r in records))
