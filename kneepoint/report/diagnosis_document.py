"""``kneepoint diagnose``'s document: where the server saturates, what binds there and why,
the knobs worth trying and the ones not, and the points it was read from."""

from __future__ import annotations

from kneepoint.load import out_of_reach, rules
from kneepoint.records import Diagnosis, Pruning, StudySpec, SweepResult
from kneepoint.report.binding import evidence_table, pruning_tables
from kneepoint.report.document import Document, Heading, Paragraph, Table
from kneepoint.report.measured import objective_text, slo


def capacity_words(result: SweepResult) -> str:
    """The sweep's SLO capacity in words: a floor says so, and why."""
    if not result.capacity_rps:
        if result.could_not_tell:
            return f"no point could be counted ({result.points[0].why_not_counted()})"
        return "no rate tried met the SLO"
    if result.floor_reason is not None:
        return (
            f"SLO capacity at least {result.capacity_rps:.2f} req/s (a floor, not the "
            f"knee: {result.floor_reason})"
        )
    return f"SLO capacity {result.capacity_rps:.2f} req/s"


def findings_document(
    study: StudySpec, result: SweepResult, diagnosis: Diagnosis, pruning: Pruning
) -> Document:
    """``kneepoint diagnose``'s report: the capacity, what binds there and why, the knobs
    worth trying and not, and every measured point."""
    doc = Document(f"kneepoint diagnosis: {study.name}")
    capacity = capacity_words(result)
    if not rules(study.objective).is_capacity:
        capacity += f"; the study's objective, {objective_text(result, study.objective)}"
    rate = f" at {diagnosis.rate_rps:.2f} req/s" if diagnosis.rate_rps else ""
    doc.add(
        Paragraph(
            f"{study.model.name} on {study.gpu.name} ({study.gpu.kind}, "
            f"{study.backend.kind}); {capacity}."
        )
    )
    reach = out_of_reach(study.objective, result.capacity_rps, rules(study.objective).value(result))
    if reach is not None:
        doc.add(Paragraph(f"Out of reach: {reach}."))
    slo(study, doc)
    doc.add(
        Heading("What binds"),
        Paragraph(f"{diagnosis.headline()}{rate}."),
        evidence_table(diagnosis),
        Heading("Knobs worth trying, and not"),
        *pruning_tables(pruning),
        Heading("Measured points"),
        Table(
            [
                "rate req/s",
                "SLO margin",
                "goodput req/s",
                "meets SLO",
                "server / rate x latency",
                "counted",
            ],
            [
                [
                    f"{p.rate_rps:.2f}",
                    f"{p.margin:.2f}",
                    f"{p.point.goodput_rps:.2f}",
                    "yes" if p.point.meets_slo else "no: " + "; ".join(p.point.violations),
                    "n/a"
                    if p.point.concurrency_ratio is None
                    else f"{p.point.concurrency_ratio:.2f}",
                    p.why_not_counted() or "yes",
                ]
                for p in sorted(result.points, key=lambda p: p.rate_rps)
            ],
        ),
    )
    return doc
