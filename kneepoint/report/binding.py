"""The report's diagnosis sections: what binds and why (each reading the verdict weighed) and
the knobs pruned, for the starting configuration and after every promotion. ``kneepoint
diagnose`` prints the same tables."""

from __future__ import annotations

from kneepoint.records import Diagnosis, Pruning
from kneepoint.report.data import ReportData
from kneepoint.report.document import Document, Heading, Paragraph, Table


def evidence_table(diagnosis: Diagnosis) -> Table:
    """Every reading the diagnosis weighed: its value, threshold, what it points to, weight."""
    rows = [
        [
            e.signal,
            "-" if e.value is None else f"{e.value:g}",
            e.threshold,
            e.reading,
            e.supports or "context",
            f"{e.weight:.2f}",
        ]
        for e in diagnosis.evidence
    ]
    return Table(["signal", "value", "threshold", "reading", "points to", "weight"], rows)


def _stages(data: ReportData) -> list[tuple[str, Diagnosis, Pruning]]:
    """Each incumbent's diagnosis and pruning: the start's, then one per promotion."""
    state = data.state
    stages = []
    if state.baseline is not None:
        stages.append(("At the start", state.baseline.diagnosis, state.baseline.pruning))
    stages += [
        (f"After trial {p.trial} was promoted", p.diagnosis, p.pruning) for p in state.promotions
    ]
    return stages


def bottleneck(data: ReportData, doc: Document) -> None:
    """What binds and why, for the start and after each promotion."""
    doc.add(Heading("What binds and why"))
    for title, diagnosis, _ in _stages(data):
        sources = ", ".join(diagnosis.sources) or "none"
        doc.add(
            Heading(title, 3),
            Paragraph(f"{diagnosis.headline()}. {evidence_shares(diagnosis)} Sources: {sources}."),
            evidence_table(diagnosis),
        )


def evidence_shares(diagnosis: Diagnosis) -> str:
    """Each constraint's share of the evidence's weight, largest first, summing to 100%:
    the weights overlap (two signals can count the same seconds), so read alone they are
    no shares of anything."""
    total = sum(diagnosis.scores.values())
    if total <= 0:
        return "No evidence weighed."
    ranked = sorted(diagnosis.scores.items(), key=lambda item: -item[1])
    return "Share of the evidence: " + ", ".join(f"{c} {v / total:.0%}" for c, v in ranked) + "."


def pruning_tables(pruning: Pruning, said: set[str] | None = None) -> list[Table]:
    """The knobs worth trying, with move and prediction, the knobs ruled out, with why, and
    the notes of knobs not already in ``said`` (a knob's note is said once in a report, at
    the first configuration it was read from)."""
    tried = [
        [
            c.knob.name,
            c.direction + (f" {c.target}" if c.target is not None else ""),
            f"{c.predicted_ratio:.2f}x",
            c.relieves,
            c.reason,
            "yes" if c.needs_quality_check else "",
        ]
        for c in pruning.candidates
    ]
    ruled = [[r.knob, r.reason] for r in pruning.ruled_out]
    header = ["worth trying", "move", "predicted", "relieves", "why", "quality check"]
    tables = [
        Table(header, tried or [["(none)", "", "", "", "", ""]]),
        Table(["ruled out", "why"], ruled or [["(none)", ""]]),
    ]
    said = set() if said is None else said
    notes = [[knob, note] for knob, note in pruning.notes.items() if knob not in said]
    said.update(knob for knob, _ in notes)
    return [*tables, Table(["knob", "note"], notes)] if notes else tables


def pruned(data: ReportData, doc: Document) -> None:
    """The knobs pruned and why, for the start and after each promotion."""
    doc.add(Heading("Knobs pruned and why"))
    said: set[str] = set()
    for title, _, pruning in _stages(data):
        doc.add(Heading(title, 3), *pruning_tables(pruning, said))
