"""The report's account of speculative decoding where the run probed acceptance or a
configuration it shows speculated: the acceptance the server measured at each draft position,
the tokens a draft yielded, and the share of decoding steps that drafted (vLLM's spec-decode
counters, ``SpecReading``)."""

from __future__ import annotations

from kneepoint.records import AcceptanceProbe, LoadPoint, SpecReading
from kneepoint.report.data import ReportData
from kneepoint.report.document import Bullets, Document, Heading, Paragraph


def section(data: ReportData, doc: Document) -> None:
    """Shown where the run probed acceptance, or the start or the final configuration ran
    with speculation."""
    items = []
    baseline = data.state.baseline
    if baseline is not None and baseline.acceptance is not None:
        items.append(probe_words(baseline.acceptance))
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
            "lengths from these at the knee's batch; where the start did not speculate, from "
            "the acceptance probe (the start with drafts on, one low rate)."
        ),
        Bullets(items),
    )


def probe_words(probe: AcceptanceProbe) -> str:
    """The acceptance probe in one line: what it read, or why it read nothing."""
    k = probe.speculative_config.get("num_speculative_tokens")
    said = (
        f"acceptance probe ({k}-token n-gram drafts on the start, {probe.rate_rps:.2f} req/s, "
        f"{probe.device_s:.0f} device-s)"
    )
    if probe.failure is not None:
        return f"{said}: failed: {probe.failure}"
    spec = probe.reading
    if spec is None:
        return f"{said}: the server exported no spec-decode counters"
    return f"{said}: {_counts(spec)}"


def reading_words(label: str, point: LoadPoint) -> str:
    spec = point.signals.speculation
    assert spec is not None
    return f"{label} @ {point.rate_rps:.2f} req/s: {_counts(spec)}"


def _counts(spec: SpecReading) -> str:
    shares = ", ".join(f"{p:.2f}" for p in spec.accepted_by_position) or "not exported"
    length = spec.acceptance_length or 1.0
    drafted = spec.draft_share
    share = f"{drafted:.0%} of decoding steps drafted" if drafted is not None else "no decode"
    return (
        f"accepted by position {shares}; {length:.2f} tokens a draft; {share} "
        f"({spec.drafts:,.0f} drafts)"
    )
