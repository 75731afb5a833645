"""The report's burst section: the winner at its operating rate, a burst, and how long TTFT
took to come back within the SLO (``kneepoint.tune.burst_step``), window by window."""

from __future__ import annotations

from kneepoint.report.data import ReportData
from kneepoint.report.document import Document, Heading, Paragraph, Table


def section(data: ReportData, doc: Document) -> None:
    checked = data.state.burst
    doc.add(Heading("Burst recovery"))
    if checked is None:
        doc.add(Paragraph("Not measured yet: the run has not finished its search."))
        return
    doc.add(Paragraph(checked.summary() + "."))
    if checked.skipped:
        return
    doc.add(
        Paragraph(
            "The winner ran at its operating rate (its SLO capacity's lower end less the fleet's "
            f"headroom, {data.study.fleet.headroom:.0%}), then {checked.burst_rps:.2f} req/s for "
            f"{checked.burst_s:g} s, then back. Each window below holds the requests scheduled in "
            "it (about 100, at least 5 s; windows overlap by half); its margin is the worst TTFT "
            "percentile over its limit (above 1 misses). Recovery is from the burst's end to the "
            "first window from which every later one is within the limits."
        )
    )
    rows = [
        [
            f"{w.start_s:+.1f}",
            str(w.requests),
            f"{w.ttft_margin:.2f}",
            "yes" if w.ttft_margin <= 1.0 else "no",
        ]
        for w in checked.windows
    ]
    doc.add(
        Table(["window start (s after the burst)", "requests", "TTFT margin", "within SLO"], rows)
    )
