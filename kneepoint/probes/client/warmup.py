"""A server's warm-up (``kneepoint.load.warmup``), sent over HTTP before its first load point
and thrown away."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from kneepoint.load import warmup_plan
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.runtime import run_async
from kneepoint.records import StudySpec, TraceEntry

log = structlog.get_logger(__name__)


def warm_up(
    url: str, study: StudySpec, options: LoadOptions, trace: Sequence[TraceEntry] = ()
) -> None:
    """Send the study's warm-up plan and wait for it; what it measured is discarded (a server
    that fails it will fail the first point too)."""
    plan = warmup_plan(study.workload, study.model.vocab_size, trace)
    records = run_async(run_load(url, plan, options))
    log.info("server.warmed", requests=len(records), failed=sum(not r.ok for r in records))
