"""The report's word on where a run over several GPU sets ran: each node's steps and GPUs,
and every attempt that measured nothing (lost with its node, or no longer needed when it
landed) with the device time it cost, which the run's budget counted."""

from __future__ import annotations

from collections import defaultdict

from kneepoint.records import Placed
from kneepoint.report.data import ReportData
from kneepoint.report.document import Bullets, Document, Heading, Paragraph, Table


def section(data: ReportData, doc: Document) -> None:
    """Nothing for a run on one GPU (it places no step)."""
    placed = data.state.placements
    if not placed:
        return
    by_node: dict[str, list[Placed]] = defaultdict(list)
    for event in placed:
        by_node[event.node].append(event)
    rows = [
        [
            node,
            str(sum(e.lost is None for e in events)),
            ", ".join(sorted({i for e in events for i in e.gpu_ids}, key=_number)) or "-",
            str(sum(e.lost is not None for e in events)),
        ]
        for node, events in sorted(by_node.items())
    ]
    doc.add(
        Heading("Where it ran"),
        Table(["node", "steps kept", "GPU ids used", "attempts that measured nothing"], rows),
    )
    wasted = [e for e in placed if e.lost is not None]
    if not wasted:
        doc.add(Paragraph("Every step was measured once, at its first attempt."))
        return
    spent_h = sum(e.device_s for e in wasted) / 3600
    doc.add(
        Paragraph(
            f"{len(wasted)} attempt(s) measured nothing; their {spent_h:.2f} device-hours are "
            "counted in the run's budget:"
        ),
        Bullets([f"{e.step} (attempt {e.attempt}, {e.node}): {e.lost}" for e in wasted]),
    )


def _number(gpu_id: str) -> tuple[int, str]:
    return (int(gpu_id), "") if gpu_id.isdigit() else (0, gpu_id)
