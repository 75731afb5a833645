"""The report's sections, in the order a person reads them the morning after: the summary, what
binds and why, the curves, the signals at the knee, the knobs pruned, every trial, and how well
the predictions held up."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from kneepoint.agent.report import plots
from kneepoint.agent.report.data import Curve, ReportData
from kneepoint.agent.report.document import (
    Bullets,
    Code,
    Document,
    Heading,
    Image,
    Paragraph,
    Table,
)
from kneepoint.agent.state import TrialState
from kneepoint.records.diagnosis import Diagnosis
from kneepoint.records.proposal import Pruning
from kneepoint.records.sweep import SweepResult


def _cap(result: SweepResult | None) -> str:
    if result is None or result.capacity_rps is None:
        return "no rate met the SLO"
    low, high = result.capacity_low_rps, result.capacity_high_rps
    spread = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    return f"{result.capacity_rps:.2f} req/s{spread}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def summary(data: ReportData, doc: Document) -> None:
    state, study = data.state, data.study
    start = state.baseline
    items = []
    if start is not None:
        items.append(f"Started at {_cap(start.repeats)} (95% interval over "
                     f"{len(start.repeats.capacity_by_repeat)} repeats); "
                     f"{start.diagnosis.headline()}.")  # fmt: skip
    if state.promotions:
        last = state.promotions[-1]
        gain = data.overall
        gain_text = (f"{_pct(gain.gain_rel)} [{_pct(gain.gain_low_rel)}, "
                     f"{_pct(gain.gain_high_rel)}] over the start" if gain else "")  # fmt: skip
        items.append(f"Now {_cap(last.repeats)}: {gain_text} after {len(state.promotions)} "
                     f"promotion(s).")  # fmt: skip
    elif start is not None:
        items.append("No change beat the starting configuration beyond the noise: keep it.")
    if state.diagnosis is not None:
        items.append(f"What binds now: {state.diagnosis.headline()}.")
    if state.finished is not None:
        items.append(f"Stopped: {state.finished.reason.replace('_', ' ')}: "
                     f"{state.finished.detail}.")  # fmt: skip
    hours = state.device_s / 3600.0
    price = study.budget.price_per_gpu_hour_usd
    cost = f", ${hours * price:.2f} at ${price:g}/GPU-hour" if price is not None else ""
    validated = sum(t.validated is not None for t in state.trials.values())
    items.append(f"Search cost: {state.trials_run} trials ({validated} validated, "
                 f"{len(state.promotions)} promoted), {hours:.2f} device-hours{cost}.")  # fmt: skip
    doc.add(Heading("Summary"), Bullets(items), Paragraph("Recommended command:"),
            Code(data.command))  # fmt: skip


def evidence_table(diagnosis: Diagnosis) -> Table:
    rows = [
        [e.signal, "-" if e.value is None else f"{e.value:g}", e.threshold, e.reading,
         e.supports or "context", f"{e.weight:.2f}"]
        for e in diagnosis.evidence
    ]  # fmt: skip
    return Table(["signal", "value", "threshold", "reading", "points to", "weight"], rows)


def _stages(data: ReportData) -> list[tuple[str, Diagnosis, Pruning]]:
    """Each incumbent's diagnosis and pruning: the start's, then one per promotion."""
    state = data.state
    stages = []
    if state.baseline is not None:
        stages.append(("At the start", state.baseline.diagnosis, state.baseline.pruning))
    stages += [(f"After trial {p.trial} was promoted", p.diagnosis, p.pruning)
               for p in state.promotions]  # fmt: skip
    return stages


def bottleneck(data: ReportData, doc: Document) -> None:
    doc.add(Heading("What binds and why"))
    for title, diagnosis, _ in _stages(data):
        scores = ", ".join(f"{c} {v:.0%}" for c, v in diagnosis.scores.items())
        sources = ", ".join(diagnosis.sources) or "none"
        doc.add(Heading(title, 3),
                Paragraph(f"{diagnosis.headline()}. Shares of wall time: {scores}. Sources: "
                          f"{sources}."), evidence_table(diagnosis))  # fmt: skip


def _curve_table(curve: Curve) -> Table:
    labels = list(curve.points[0].values_ms) if curve.points else []
    rows = [
        [f"{p.rate_rps:.2f}", f"{p.goodput_rps:.2f}", "yes" if p.meets_slo else "no",
         *(("inf" if math.isinf(p.values_ms[k]) else f"{p.values_ms[k]:.1f}") for k in labels)]
        for p in curve.points
    ]  # fmt: skip
    return Table(["rate req/s", "goodput req/s", "meets SLO", *(f"{k} ms" for k in labels)], rows)


def curves(data: ReportData, doc: Document, out: Path) -> None:
    doc.add(Heading("Latency vs load"),
            Paragraph("Mean over repeats at each offered rate; dotted lines mark each "
                      "configuration's SLO capacity, dashed lines the SLO."))  # fmt: skip
    for make in (plots.latency_curves, plots.goodput_curves):
        path = make(data, out)
        if path is not None:
            doc.add(Image(path, path.stem.replace("-", " ")))
    for curve in (data.start, data.final):
        if curve is not None:
            doc.add(Heading(f"{curve.label}: {_cap(curve.result)}", 3), _curve_table(curve))


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
    names = [n for n, v in known[0][1].signals.model_dump().items() if v is not None]
    rows = [[n, *(_show(getattr(p.signals, n)) for _, p in known)] for n in names]
    doc.add(Table(["signal", *(f"{label} @ {p.rate_rps:.2f} req/s" for label, p in known)], rows))


def _show(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def pruning_tables(pruning: Pruning) -> list[Table]:
    tried = [[c.knob.name, c.direction + (f" {c.target}" if c.target is not None else ""),
              f"{c.predicted_ratio:.2f}x", c.relieves, c.reason,
              "yes" if c.needs_quality_check else ""] for c in pruning.candidates]  # fmt: skip
    ruled = [[r.knob, r.reason] for r in pruning.ruled_out]
    header = ["worth trying", "move", "predicted", "relieves", "why", "quality check"]
    return [Table(header, tried or [["(none)", "", "", "", "", ""]]),
            Table(["ruled out", "why"], ruled or [["(none)", ""]])]  # fmt: skip


def pruned(data: ReportData, doc: Document) -> None:
    doc.add(Heading("Knobs pruned and why"))
    for title, _, pruning in _stages(data):
        doc.add(Heading(title, 3), *pruning_tables(pruning))


def _verdict(trial: TrialState) -> str:
    if trial.screened is None:
        return "not measured yet"
    if trial.promoted is not None:
        return "promoted"
    if trial.validated is not None and trial.validated.failure is not None:
        return f"failed {trial.validated.failure.detail}"
    if trial.validated is not None and trial.validated.judgement is not None:
        return f"not promoted: {trial.validated.judgement.reason}"
    if trial.quality is not None and not trial.quality.passed:
        return f"rejected by the quality check: {trial.quality.reason}"
    return trial.screened.reason


def trials(data: ReportData, doc: Document) -> None:
    doc.add(Heading("Trials"))
    rows = []
    for t in data.trials:
        screened = t.screened
        result = "-" if screened is None else (
            f"{screened.outcome.objective:.2f} req/s" if screened.outcome.objective is not None
            else screened.outcome.status)  # fmt: skip
        device = sum(e.device_s for e in (t.screened, t.quality, t.validated) if e is not None)
        rows.append([str(t.trial), t.proposal.reason, t.proposal.proposer,
                     f"{t.proposal.prediction.capacity_ratio:.2f}x", result,
                     _pct(_ratio(t)), _verdict(t), f"{device / 60:.1f}"])  # fmt: skip
    doc.add(Table(["#", "change and why", "proposer", "predicted", "screened", "measured gain",
                   "verdict", "device min"], rows))  # fmt: skip


def _ratio(trial: TrialState) -> float | None:
    ratio = trial.measured_ratio()
    return None if ratio is None else ratio - 1.0


def predictions(data: ReportData, doc: Document, out: Path) -> None:
    doc.add(Heading("How well the predictions held up"))
    pairs = [(t.proposal.prediction.capacity_ratio, r) for t in data.trials
             if (r := t.measured_ratio()) is not None and r > 0]  # fmt: skip
    if not pairs:
        doc.add(Paragraph("No trial has been measured yet."))
        return
    right = sum((p > 1.02) == (m > 1.02) for p, m in pairs)
    errors = [abs(math.log(m / p)) for p, m in pairs]
    doc.add(Paragraph(f"Direction right in {right} of {len(pairs)} trials; median size error "
                      f"{math.exp(statistics.median(errors)) - 1:.0%} (predicted vs measured "
                      "ratio)."))  # fmt: skip
    path = plots.predictions(data, out)
    if path is not None:
        doc.add(Image(path, "predicted vs measured capacity ratio, by trial"))


def build(data: ReportData) -> Document:
    out = data.folder.path / "plots"
    doc = Document(f"kneepoint report: {data.study.name}")
    study = data.study
    setting = f"{study.model.name} on {study.gpu.name} ({study.backend.kind} backend)"
    doc.add(Paragraph(f"{setting}, workload {study.workload.name}; objective "
                      f"{study.objective.kind}."))  # fmt: skip
    summary(data, doc)
    bottleneck(data, doc)
    curves(data, doc, out)
    signals(data, doc, out)
    pruned(data, doc)
    trials(data, doc)
    predictions(data, doc, out)
    doc.add(Heading("The run folder"),
            Bullets([f"{data.folder.path}", "ledger.jsonl: every decision and measurement",
                     "trials/: sweeps, server logs, request records, metric snapshots",
                     f"optuna.db: optuna-dashboard {data.folder.optuna_url}",
                     "best.yaml and best-command.txt: the winner"]))  # fmt: skip
    return doc
