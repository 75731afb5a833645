"""A one-off bottleneck diagnosis of a server: where it saturates, what binds there and why,
the knobs worth trying and the ones not worth trying. No knob is changed.

With a known knee it measures one point past it and one below it; otherwise a coarse knee
search (geometric ramp, loose bisection) finds them. Everything measured is kept in a folder
``runs/diagnose-<study>-<timestamp>/`` beside the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kneepoint.load.objective import rules
from kneepoint.measure import sweep
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.measure.watch import Watched
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.diagnose import diagnose
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.probes.target import Prober
from kneepoint.probes.targets import PointArtifacts, PointSize, open_target
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.diagnosis import Diagnosis
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.proposal import Pruning
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepResult
from kneepoint.report.binding import evidence_table, pruning_tables
from kneepoint.report.document import Document, Heading, Paragraph, Table
from kneepoint.report.measured import objective_text, slo
from kneepoint.run.files import write_atomically
from kneepoint.run.folder import write_point
from kneepoint.run.progress import Progress


@dataclass(frozen=True)
class Findings:
    result: SweepResult
    diagnosis: Diagnosis
    pruning: Pruning


def measure_and_diagnose(
    study: StudySpec,
    folder: Path,
    catalogue: KnobCatalogue,
    progress: Progress,
    knee_rps: float | None = None,
) -> Findings:
    """Measure ``study.engine`` and diagnose it; every point is told to ``progress`` as it
    lands, and an interrupt leaves what was measured in ``folder``'s sweep.json."""
    config = study.engine
    size = PointSize.for_study(study, study.tuning.screen_seconds)

    def keep(artifacts: PointArtifacts) -> None:
        write_point(folder, "diagnose", artifacts)

    with open_target(study, config, folder, size, keep) as target:
        watched = Watched(target.probe, progress, "diagnose", study.slo)
        try:
            result = _measure(study, watched, progress, knee_rps)
        except KeyboardInterrupt:
            if watched.points:
                interrupted = watched.interrupted(config)
                write_atomically(folder / "sweep.json", interrupted.model_dump_json(indent=1))
            raise
        version = target.endpoint.version if target.endpoint is not None else None
    write_atomically(folder / "sweep.json", result.model_dump_json(indent=1) + "\n")
    return findings_of(study, result, catalogue, version)


def _measure(
    study: StudySpec, probe: Prober, progress: Progress, knee_rps: float | None
) -> SweepResult:
    """The study's knee search, or (with a known knee) one rate below it and one past it;
    then the objective's own rates where it reads others."""
    config, slo, retakes = study.engine, study.slo, study.measurement.retakes
    if knee_rps is None:
        progress.phase("diagnose", "knee search")
        result = study_knee_search(probe, study, config)
    else:
        progress.phase("diagnose", f"one point past {knee_rps:g} req/s and one below", 2)
        rates = [0.6 * knee_rps, 1.2 * knee_rps]
        result = sweep.measure_rates(probe, config, slo, rates, kind="knee", retakes=retakes)
    if not rules(study.objective).is_capacity and result.points:
        # The objective's own rates too: a diagnosis never reports another objective.
        knee = result.capacity_rps or max(p.rate_rps for p in result.points)
        rates = rules(study.objective).repeat_rates(knee)
        progress.phase("diagnose", f"{rules(study.objective).name()}: {len(rates)} points")
        at = sweep.measure_rates(probe, config, slo, rates, kind="knee", retakes=retakes)
        result = sweep.merge([result, at], kind="knee")
    return result


def findings_of(
    study: StudySpec, result: SweepResult, catalogue: KnobCatalogue, version: str | None = None
) -> Findings:
    """The diagnosis and the knob advice a sweep of ``study.engine`` supports: what a live
    diagnosis concludes, and what ``--from`` concludes again from a recording."""
    context = context_of(observe_study(study, result.config, result))
    diagnosis = diagnose(context)
    # Advice for whoever runs the server, even when kneepoint itself cannot change it.
    backend = study.backend
    if version is None:
        version = backend.stated_vllm_version
    if not backend.owns_knobs:  # judged as the vLLM server someone else started
        backend = VllmBackend(vllm_version=version)
    pruning = prune(
        diagnosis,
        context,
        catalogue,
        allowed=study.search.knobs,
        vllm_version=version,
        backend=backend,
        gpus=study.gpus,
    )
    return Findings(result, diagnosis, pruning)


def capacity_words(result: SweepResult) -> str:
    """The sweep's SLO capacity in words: a floor says so, and why."""
    if not result.capacity_rps:
        return "no rate tried met the SLO"
    if result.floor_reason is not None:
        return (
            f"SLO capacity at least {result.capacity_rps:.2f} req/s (a floor, not the "
            f"knee: {result.floor_reason})"
        )
    return f"SLO capacity {result.capacity_rps:.2f} req/s"


def findings_document(study: StudySpec, findings: Findings) -> Document:
    doc = Document(f"kneepoint diagnosis: {study.name}")
    result, diagnosis = findings.result, findings.diagnosis
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
    slo(study, doc)
    doc.add(
        Heading("What binds"),
        Paragraph(f"{diagnosis.headline()}{rate}."),
        evidence_table(diagnosis),
        Heading("Knobs worth trying, and not"),
        *pruning_tables(findings.pruning),
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
