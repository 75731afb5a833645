"""The report's measured sections: the SLO and what its verdicts mean, the latency/load curves of
the start and the winner (every rate, how many repeats met the SLO and what the others missed),
and the signals at the knee."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from kneepoint.load import AT_RATE_TOLERANCE, mean_interval, rules
from kneepoint.records import Objective, StudySpec, SweepResult
from kneepoint.report import plots
from kneepoint.report.data import Curve, CurvePoint, ReportData, slo_lines
from kneepoint.report.document import Bullets, Document, Heading, Image, Paragraph, Table

DEFINITIONS = (
    "Meets SLO (one offered rate, one repeat): for every class, each limited percentile over "
    "the stable window (requests scheduled after the warm-up and before the drain; failed and "
    "timed-out requests count as infinitely slow) is within its limit. This is the only verdict "
    "kneepoint decides by, here and on the console.",
    "SLO capacity: the highest offered rate that meets the SLO, interpolated between the last "
    "rate that meets it and the first that does not; over repeats, their mean with a 95% "
    "interval.",
)


GOODPUT = {
    "every_limit": "Goodput (the study's rule, every limit): the offered rate times the share "
    "of that window's requests that completed and met every limit on their own (their TTFT, "
    "their own p95 gap between tokens, ...), so at most the offered rate. A rate can meet the "
    "SLO while some requests miss: a p99 limit lets 1% of requests exceed it, a p95 ITL limit "
    "5% of the gaps, and one stall fails a short answer's own p95 (slo.goodput_rule: vllm "
    "counts as vllm bench serve --goodput does).",
    "vllm": "Goodput (the study's rule, vLLM's): the offered rate times the share of that "
    "window's requests that completed with their TTFT, their mean time per output token and "
    "their end-to-end latency within the limits, as vllm bench serve --goodput counts; an ITL "
    "limit is held against the mean time per output token. At most the offered rate.",
}


def capacity_text(result: SweepResult | None) -> str:
    if result is None or result.capacity_rps is None:
        return "no rate met the SLO"
    low, high = result.capacity_low_rps, result.capacity_high_rps
    spread = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{result.capacity_rps:.2f} req/s{spread}"


def objective_text(result: SweepResult | None, objective: Objective) -> str:
    """The objective's value over a sweep's repeats, with its 95% interval."""
    rule = rules(objective)
    if rule.is_capacity:
        if not rule.per_gpu or result is None or result.capacity_rps is None:
            return capacity_text(result)
        per = rule.width(result.config)
        return (
            f"{result.capacity_rps / per:.2f} req/s per GPU ({capacity_text(result)} on "
            f"{per} GPU{'s' if per > 1 else ''})"
        )
    values = rule.by_repeat(result) if result is not None else ()
    if not values:
        return f"no {rule.name()} measured"
    mean, low, high = mean_interval(list(values))
    return f"{rule.name()} {mean:.2f} {rule.unit()} [{low:.2f}, {high:.2f}]"


def attainment(study: StudySpec, curves: Sequence[Curve], doc: Document) -> None:
    """Per class, the share of requests that met every limit at the fixed rate, by curve."""
    rate = rules(study.objective).fixed_rate_rps
    if rate is None:
        return
    rows = []
    for c in curves:
        at = [
            p.point
            for p in c.result.points
            if p.counted and abs(p.rate_rps - rate) <= AT_RATE_TOLERANCE * rate
        ]
        for name_ in sorted({k for p in at for k in p.attainment_by_class}):
            shares = [p.attainment_by_class[name_] for p in at if name_ in p.attainment_by_class]
            rows.append([c.label, name_, f"{statistics.fmean(shares):.1%}", str(len(shares))])
    doc.add(
        Heading(f"Attainment per class at {rate:g} req/s", 2),
        Paragraph(
            "The share of each class's requests that met every limit of its class, "
            "mean over repeats."
        ),
        Table(["configuration", "class", "attainment", "repeats"], rows),
    )


def slo(study: StudySpec, doc: Document) -> None:
    """The SLO at the top, with the definitions every later table uses."""
    lines = slo_lines(study)
    doc.add(Heading("Service-level objective"))
    doc.add(Bullets(lines) if lines else Paragraph("No SLO: the study measures throughput."))
    definitions = list(DEFINITIONS)
    rule = study.slo.goodput_rule if study.slo is not None else "every_limit"
    definitions.insert(1, GOODPUT[rule])
    doc.add(Bullets(definitions))


def _met(point: CurvePoint) -> str:
    """ "no (5/6 repeats)" beside 100% goodput left a reader to guess which way 5 counted."""
    met = point.repeats - len(point.misses)
    if not point.misses:
        return f"yes (all {point.repeats} repeats)" if point.repeats > 1 else "yes"
    return (
        f"no ({met} of {point.repeats} repeats met it; missed in " + "; ".join(point.misses) + ")"
    )


def _value(point: CurvePoint, label: str) -> str:
    value = point.values_ms[label]
    shown = "inf" if math.isinf(value) else f"{value:.1f}"
    if label in point.intervals_ms:
        low, high = point.intervals_ms[label]
        shown += f" ({_ms(low)}-{_ms(high)})"
    if label in point.thin:
        shown += f" (only {point.thin[label]} samples: near the maximum)"
    return shown


def _goodput(point: CurvePoint) -> str:
    shown = f"{point.goodput_rps:.2f} ({point.goodput_rps / point.rate_rps:.0%})"
    if point.goodput_from_schedule_rps is not None:
        shown += f"; {point.goodput_from_schedule_rps:.2f} from the schedule"
    return shown


def _ms(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.1f}"


def _curve_table(curve: Curve) -> Table:
    labels = list(curve.points[0].values_ms) if curve.points else []
    rows = [
        [
            f"{p.rate_rps:.2f}",
            _met(p),
            _goodput(p),
            *(_value(p, k) for k in labels),
        ]
        for p in curve.points
    ]
    header = ["rate req/s", "meets SLO", "goodput req/s (of offered)"]
    return Table([*header, *(f"{k} ms (mean, interval)" for k in labels)], rows)


def curves(data: ReportData, doc: Document, out: Path) -> None:
    doc.add(
        Heading("Latency vs load"),
        Paragraph(
            "Latencies are the mean over repeats at each offered rate; the verdict "
            "is per repeat. Dotted lines mark each configuration's SLO capacity, "
            "dashed lines the SLO. A percentile read off fewer samples than it needs "
            "(100 for a p99, 20 for a p95) is the sample's maximum, or close to it: "
            "its cell says so, and a longer load point would resolve it. Beside each "
            "mean, its bootstrap interval at the study's confidence: the requests of "
            "every repeat's stable window drawn again with replacement (requests, "
            "not single token gaps: a request's gaps are not independent), 400 "
            "times."
        ),
    )
    for make in (plots.latency_curves, plots.goodput_curves):
        path = make(data, out)
        if path is not None:
            doc.add(Image(path, path.stem.replace("-", " ")))
    for curve in (data.start, data.final):
        if curve is not None:
            doc.add(
                Heading(f"{curve.label}: {capacity_text(curve.result)}", 3), _curve_table(curve)
            )


def signals(data: ReportData, doc: Document, out: Path) -> None:
    doc.add(Heading("Signals at the knee"))
    path = plots.knee_signals(data, out)
    if path is not None:
        doc.add(Image(path, "signals just past the knee"))
    columns = [(c.label, data.knee_point(c)) for c in (data.start, data.final) if c is not None]
    known = [(label, point) for label, point in columns if point is not None]
    if not known:
        doc.add(Paragraph("No measured point past the knee."))
        return
    # Scalar readings only: a structured one (the server's own latency histograms, a
    # speculation reading) printed as "{}" in a row of numbers.
    dumped = known[0][1].signals.model_dump().items()
    names = [n for n, v in dumped if isinstance(v, int | float | str) and v is not None]
    rows = [[n, *(_show(getattr(p.signals, n)) for _, p in known)] for n in names]
    doc.add(Table(["signal", *(f"{label} @ {p.rate_rps:.2f} req/s" for label, p in known)], rows))


def _show(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)
