"""The report's account of speculative decoding where a configuration it shows speculated:
the acceptance the server measured at each draft position, the tokens a draft yielded, and
the share of decoding steps that drafted (vLLM's spec-decode counters, ``SpecReading``)."""

from __future__ import annotations

from kneepoint.records.loadpoint import LoadPoint
from kneepoint.report.data import ReportData
from kneepoint.report.document import Bullets, Document, Heading, Paragraph


def section(data: ReportData, doc: Document) -> None:
    """Shown where the start or the final configuration ran with speculation."""
    items = []
    for curve in (c for c in (data.start, data.final) if c is not None):
        read = [p.point for p in curve.result.points if p.point.signals.speculation]
        if read:
            point = data.knee_point(curve) or max(read, key=lambda p: p.rate_rps)
            items.append(reading_words(curve.label, point if point in read else read[-1]))
    if not items:
        return
    doc.add(
        Heading("Speculative decoding"),
        Paragraph(
            "Acceptance as the server counted it (vllm:spec_decode_* counters over the "
            "point): the share of drafts whose token at each position was accepted, and what "
            "a draft yielded with the target's own token. The knob's rule prices other draft "
            "lengths from these at the knee's batch."
        ),
        Bullets(items),
    )


def reading_words(label: str, point: LoadPoint) -> str:
    spec = point.signals.speculation
    assert spec is not None
    shares = ", ".join(f"{p:.2f}" for p in spec.accepted_by_position) or "not exported"
    length = spec.acceptance_length or 1.0
    drafted = spec.draft_share
    share = f"{drafted:.0%} of decoding steps drafted" if drafted is not None else "no decode"
    return (
        f"{label} @ {point.rate_rps:.2f} req/s: accepted by position {shares}; "
        f"{length:.2f} tokens a draft; {share} ({spec.drafts:,.0f} drafts)"
    )
