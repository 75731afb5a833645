"""The report's sections, in the order a person reads them the morning after: the summary, what
binds and why, the curves, the signals at the knee, the knobs pruned, every trial, and how well
the predictions held up."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from kneepoint.config import study_gpu_mismatch
from kneepoint.load import rules
from kneepoint.records import Finished
from kneepoint.report import burst, measured, pareto, placement, plots, speculation, traffic
from kneepoint.report.binding import bottleneck, pruned
from kneepoint.report.data import ReportData
from kneepoint.report.document import (
    Bullets,
    Code,
    Document,
    Heading,
    Image,
    Paragraph,
    Table,
)
from kneepoint.report.fleet import fleet
from kneepoint.report.measured import objective_text
from kneepoint.report.node import node_item
from kneepoint.run import TrialState


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _unchecked(data: ReportData) -> list[TrialState]:
    """Promoted trials that changed model outputs without a quality check."""
    return [t for t in data.trials if t.promoted is not None and t.unchecked_quality]


def _progress_items(data: ReportData) -> list[str]:
    state = data.state
    items = []
    start = state.baseline
    if start is None:
        return ["The baseline has not finished: no capacity has been measured yet."]
    objective = data.study.objective
    text = objective_text(start.repeats, objective)
    repeats = len(rules(objective).by_repeat(start.repeats))
    # "no rate met the SLO" or "no goodput measured": "Started at no rate met..." read ill
    started = (
        f"At the start, {text}"
        if text.startswith("no ")
        else f"Started at {text} (95% interval over {repeats} repeats)"
    )
    items.append(f"{started}; {start.diagnosis.headline()}.")
    if state.promotions:
        last, gain = state.promotions[-1], data.overall
        gain_text = (
            f"{_pct(gain.gain_rel)} [{_pct(gain.gain_low_rel)}, "
            f"{_pct(gain.gain_high_rel)}] over the start "
            if gain
            else ""
        )
        items.append(
            f"Now {objective_text(last.repeats, objective)}: {gain_text}after "
            f"{len(state.promotions)} promotion(s)."
        )
    elif state.finished is not None and state.trials_run:
        items.append("No change beat the starting configuration beyond the noise: keep it.")
    for trial in _unchecked(data):
        items.append(
            f"Not quality-checked: trial {trial.trial} ({trial.proposal.reason}) "
            f"changes model outputs and was accepted without a check "
            f"({trial.quality.reason if trial.quality else ''}). Compare its outputs "
            "with the starting configuration's before serving it."
        )
    if state.diagnosis is not None:
        items.append(f"What binds now: {state.diagnosis.headline()}.")
    if (node := node_item(data)) is not None:
        items.append(node)
    return items


def summary(data: ReportData, doc: Document) -> None:
    state, study = data.state, data.study
    items = _progress_items(data)
    if state.finished is not None:
        items.append(
            f"Stopped: {state.finished.reason.replace('_', ' ')}: {state.finished.detail}."
        )
    else:
        items.append(
            f"The run is still running or was interrupted; resume it with "
            f"`kneepoint tune {data.folder.path}`."
        )
    hours = state.device_s / 3600.0
    price = study.budget.price_per_gpu_hour_usd
    cost = f", ${hours * price:.2f} at ${price:g}/GPU-hour" if price is not None else ""
    validated = sum(t.validated is not None for t in state.trials.values())
    items.append(
        f"Search cost: {state.trials_run} trials ({validated} validated, "
        f"{len(state.promotions)} promoted), {hours:.2f} device-hours{cost}."
    )
    caveat = " (not quality-checked: see above)" if _unchecked(data) else ""
    said = _command_said(data)
    doc.add(Heading("Summary"), Bullets(items), Paragraph(f"{said}{caveat}:"), Code(data.command))


def _command_said(data: ReportData) -> str:
    """How the command is offered: recommended only where a trial beat the start and a rate
    met the SLO; else the starting command, said as such (a kept start is no winner)."""
    state, study = data.state, data.study
    if state.baseline is None:
        return "Starting command (not measured yet)"
    sweeps = [state.baseline.knee, state.baseline.repeats, *(p.repeats for p in state.promotions)]
    met = any(point.point.meets_slo for sweep in sweeps for point in sweep.points)
    if study.slo is not None and not met:
        return "Starting command (no rate met the SLO, so none is recommended)"
    if state.promotions:
        return "Recommended command"
    if state.finished is None:
        return "Starting command (no trial promoted yet)"
    return "Starting command, kept (no trial was promoted)"


def _verdict(trial: TrialState, finished: Finished | None) -> str:
    if trial.screened is None:
        return "not measured yet"
    if finished is not None and trial.next_step() is not None:
        return f"{trial.screened.reason}; left unvalidated: the run stopped ({finished.reason})"
    sweeps = [
        trial.screened.sweep,
        *(
            (trial.validated.incumbent, trial.validated.challenger)
            if trial.validated is not None
            else ()
        ),
    ]
    retried = [cause for s in sweeps if s is not None for cause in s.retried]
    survived = f"(a server failed and was replaced: {retried[0]}) " if retried else ""
    return survived + _outcome_words(trial)


def _outcome_words(trial: TrialState) -> str:
    assert trial.screened is not None
    if trial.promoted is not None:
        early = trial.validated is not None and trial.validated.early
        verdict = "promoted from its first pair" if early else "promoted"
        return f"{verdict}, not quality-checked" if trial.unchecked_quality else verdict
    if trial.validated is not None and trial.validated.failure is not None:
        return f"failed {trial.validated.failure.detail}"
    if trial.validated is not None and trial.validated.judgement is not None:
        return f"not promoted: {trial.validated.judgement.reason}"
    if trial.quality is not None and trial.quality.rejects:
        return f"rejected by the quality check: {trial.quality.reason}"
    return trial.screened.reason


def trials(data: ReportData, doc: Document) -> None:
    doc.add(Heading("Trials"))
    rows = []
    for t in data.trials:
        screened = t.screened
        result = (
            "-"
            if screened is None
            else (
                f"{screened.outcome.objective:.2f} {rules(data.study.objective).unit()}"
                if screened.outcome.objective is not None
                else screened.outcome.status
            )
        )
        device = sum(e.device_s for e in (t.screened, t.quality, t.validated) if e is not None)
        rows.append(
            [
                str(t.trial),
                t.proposal.reason,
                t.proposal.proposer,
                f"{t.proposal.prediction.capacity_ratio:.2f}x",
                result,
                _pct(_ratio(t)),
                _verdict(t, data.state.finished),
                f"{device / 60:.1f}",
            ]
        )
    doc.add(
        Table(
            [
                "#",
                "change and why",
                "proposer",
                "predicted",
                "screened",
                "measured gain",
                "verdict",
                "device min",
            ],
            rows,
        )
    )


def _ratio(trial: TrialState) -> float | None:
    ratio = trial.measured_ratio()
    return None if ratio is None else ratio - 1.0


def predictions(data: ReportData, doc: Document, out: Path) -> None:
    doc.add(Heading("How well the predictions held up"))
    pairs = [
        (t.proposal.prediction.capacity_ratio, r)
        for t in data.trials
        if (r := t.measured_ratio()) is not None and r > 0
    ]
    if not pairs:
        doc.add(Paragraph("No trial has been measured yet."))
        return
    right = sum((p > 1.02) == (m > 1.02) for p, m in pairs)
    errors = [abs(math.log(m / p)) for p, m in pairs]
    doc.add(
        Paragraph(
            f"Direction right in {right} of {len(pairs)} trials; median size error "
            f"{math.exp(statistics.median(errors)) - 1:.0%} (predicted vs measured "
            "ratio)."
        )
    )
    path = plots.predictions(data, out)
    if path is not None:
        doc.add(Image(path, "predicted vs measured capacity ratio, by trial"))


def build(data: ReportData) -> Document:
    out = data.folder.path / "plots"
    doc = Document(f"kneepoint report: {data.study.name}")
    study = data.study
    setting = (
        f"{study.model.name} on {study.gpu.name} ({study.gpu.kind}, {study.backend.kind} backend)"
    )
    doc.add(
        Paragraph(f"{setting}, workload {study.workload.name}; objective {study.objective.kind}.")
    )
    if data.host is not None:
        # vLLM's CPU build runs 7-10x slower without AVX-512, and the load generator shares
        # the host's cores: a reader weighing the numbers needs the machine.
        doc.add(Paragraph(f"Measured from: {data.host.words()}."))
    if (mismatch := study_gpu_mismatch(study, data.host)) is not None:
        doc.add(Paragraph(f"Warning: {mismatch}."))
    measured.slo(data.study, doc)
    summary(data, doc)
    bottleneck(data, doc)
    measured.curves(data, doc, out)
    measured.attainment(study, [c for c in (data.start, data.final) if c is not None], doc)
    measured.signals(data, doc, out)
    traffic.section(data, doc)
    speculation.section(data, doc)
    fleet(data, doc)
    placement.section(data, doc)
    burst.section(data, doc)
    pareto.section(data, doc, out)
    pruned(data, doc)
    trials(data, doc)
    predictions(data, doc, out)
    doc.add(Heading("The run folder"), Bullets(_folder_items(data)))
    return doc


def _folder_items(data: ReportData) -> list[str]:
    folder = data.folder
    items = [
        f"{folder.path}",
        "ledger.jsonl: every decision and measurement",
        "trials/: sweeps, server logs, request records, metric snapshots",
    ]
    if (folder.path / "optuna.db").is_file():
        items.append(f"optuna.db: open with optuna-dashboard {folder.optuna_url}")
    if (folder.path / "best.yaml").is_file():
        items.append("best.yaml and best-command.txt: the winner")
    return items
