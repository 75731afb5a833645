"""The report's account of the traffic's reuse: conversations (sessions, turns, and the
history they hold between turns) and the prefix cache (what a warm cache of the measured KV
pool would serve of the prompts, from the workload, beside the server's own hit rate)."""

from __future__ import annotations

from kneepoint.policies.pruning import prefix_reuse
from kneepoint.records import LoadPoint, Workload
from kneepoint.report.data import ReportData
from kneepoint.report.document import Bullets, Document, Heading, Paragraph


def section(data: ReportData, doc: Document) -> None:
    """Shown where the workload shares prompt prefixes or holds conversations."""
    workload = data.study.workload
    if not workload.conversational and not workload.prefix_groups:
        return
    doc.add(Heading("Traffic reuse and the prefix cache"))
    items = []
    for curve in (c for c in (data.start, data.final) if c is not None):
        # past the knee where there is one; else (a curve that met the SLO throughout, as at
        # one rate) its fastest point
        counted = [p.point for p in curve.result.points if p.counted]
        point = data.knee_point(curve) or max(counted, key=lambda p: p.rate_rps, default=None)
        if point is not None:
            items += _at_point(curve.label, workload, point)
    if workload.conversational:
        doc.add(Paragraph(_sessions_text(workload)))
    doc.add(Bullets(items) if items else Paragraph("No measured point."))


def _sessions_text(workload: Workload) -> str:
    turns = workload.mean_turns_per_arrival()
    return (
        f"Conversations: {turns:.2f} turns per arrival on average, "
        f"{workload.session_think_s():.1f} s of think time per conversation; every turn "
        "resends the history before it, so the offered request rate is the session rate "
        f"times {turns:.2f}. The longest request (a last turn) is "
        f"{workload.max_request_tokens():,} tokens."
    )


def _at_point(label: str, workload: Workload, point: LoadPoint) -> list[str]:
    signals = point.signals
    items = []
    if workload.conversational:
        turns = workload.mean_turns_per_arrival()
        items.append(
            f"{label} @ {point.rate_rps:.2f} req/s: {point.rate_rps / turns:.2f} sessions/s "
            f"offered x {turns:.2f} turns"
        )
    if signals.num_gpu_blocks is None or signals.block_size is None:
        return items
    kv_tokens = signals.num_gpu_blocks * signals.block_size
    reuse = prefix_reuse(workload, kv_tokens, block_tokens=signals.block_size)
    measured = signals.prefix_hit_rate
    items.append(
        f"{label}: a warm prefix cache of its {kv_tokens:,}-token KV pool would serve "
        f"{reuse.prompt_share:.0%} of prompt tokens (from the workload); the server's own "
        f"hit rate at {point.rate_rps:.2f} req/s: "
        + (f"{measured:.0%}" if measured is not None else "not reported")
        + (" (0% where prefix caching is off)" if measured == 0.0 else "")
    )
    if workload.conversational:
        items.append(
            f"{label}: a running sequence holds {reuse.context_before_tokens:,.0f} tokens of "
            "context on average, the history growing turn by turn; between turns the "
            "histories wait in the pool's free blocks, evicted least recently used first "
            "(a pool too small to keep them serves less than predicted)"
        )
    return items
