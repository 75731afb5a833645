"""A one-off bottleneck diagnosis of a server: where it saturates, what binds there and why,
the knobs worth trying and the ones not worth trying. No knob is changed.

What it measures is ``kneepoint.measure.diagnosis``'s; everything measured is kept in a folder
``runs/diagnose-<study>-<timestamp>/`` beside the report (``kneepoint.report.diagnosis_document``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from kneepoint.measure import Progress, diagnosis_sweep
from kneepoint.policies.pruning import findings
from kneepoint.records import Diagnosis, KnobCatalogue, Pruning, StudySpec, SweepResult


class Findings(NamedTuple):
    """A diagnosis and the sweep it read (``findings_document(study, *findings)``)."""

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
    """Measure ``study.engine`` (``diagnosis_sweep``) and diagnose it."""
    result, version = diagnosis_sweep(study, folder, progress, knee_rps)
    return recorded(study, result, catalogue, version)


def recorded(
    study: StudySpec, result: SweepResult, catalogue: KnobCatalogue, version: str | None = None
) -> Findings:
    """The findings a sweep of ``study.engine`` supports: what a live diagnosis concludes,
    and what ``--from`` concludes again from a recording."""
    return Findings(result, *findings(study, result.config, result, catalogue, version))
