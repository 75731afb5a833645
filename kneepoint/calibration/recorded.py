"""Recorded real sweeps: what a real engine measured, with the study it was measured under.

A recording is a ``sweep.json`` (what `kneepoint diagnose` and `kneepoint sweep` write, and what
a run folder keeps per trial) beside, or one folder below, the ``study.yaml`` it was measured
with, or a tune's run folder, whose baseline knee search is read under the run's own study;
the sweep's own engine config is what ran. The study supplies the GPU, the model shape,
the workload and the SLO; the simulator replays the recording under the same study on its
virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from kneepoint.config import ConfigError, Problem, first_problem, load_study
from kneepoint.records import SimBackend, StudySpec, SweepResult

RUN_MARK = "ledger.jsonl"
BASELINE_KNEE = Path("trials", "000-baseline", "knee.json")
"""A tune's run folder holds its ledger; its baseline's knee search is the recording."""


@dataclass(frozen=True)
class RecordedSweep:
    """One configuration as a real engine measured it."""

    name: str
    """The recording's folder name (``base``, ``fp8``), or the file's stem."""
    study: StudySpec
    """The study it was measured under, its engine set to the sweep's own config."""
    result: SweepResult
    source: Path

    @property
    def study_folder(self) -> Path:
        """The folder of the study's recordings: a tune run's parent (its baseline sits three
        folders down the run), a sweep's grandparent."""
        if self.source.parts[-len(BASELINE_KNEE.parts) :] == BASELINE_KNEE.parts:
            return self.source.parents[len(BASELINE_KNEE.parts)]
        return self.source.parent.parent

    @property
    def prompts_salted(self) -> bool:
        """Whether the sweep sent each rate its own prompts, as kneepoint's live prober does
        (``plan_requests``'s salt), so a server's prefix cache carried nothing from one point
        to the next. Read from the recording itself: a workload without shared prefixes whose
        points show prefix-cache hits was sent the same prompts at every rate (33-38% of
        prompt tokens hit in tests/fixtures/real/h100-llama8b-chat's copied recordings; 0.0%
        at every rate in the project's own H100 recordings)."""
        if self.study.workload.prefix_groups:
            return True
        return not any((p.point.signals.prefix_hit_rate or 0.0) > 0.0 for p in self.result.points)

    def simulated(self) -> StudySpec:
        """The same study on the simulator's virtual clock."""
        return self.study.model_copy(update={"backend": SimBackend()})


def study_path_for(sweep: Path) -> Path:
    """Where the study of a sweep written at ``sweep`` goes: ``study.yaml`` beside a
    ``sweep.json``, else ``<stem>.study.yaml`` beside the file."""
    return sweep.parent / (
        "study.yaml" if sweep.name == "sweep.json" else f"{sweep.stem}.study.yaml"
    )


def _study_beside(sweep: Path) -> Path:
    own = study_path_for(sweep)
    if own.is_file():
        return own
    for folder in (sweep.parent, sweep.parent.parent):
        if (folder / "study.yaml").is_file():
            return folder / "study.yaml"
    raise ConfigError(
        [
            Problem(
                str(sweep),
                None,
                (),
                "no study.yaml beside it or one folder up: the recording "
                "needs the study it was measured under",
            )
        ]
    )


def _sweep_file(path: Path) -> Path:
    if path.is_file():
        return path
    if (path / "sweep.json").is_file():
        return path / "sweep.json"
    raise ConfigError([Problem(str(path), None, (), "neither a sweep.json nor a folder with one")])


def load_recorded(path: Path, study: StudySpec | None = None) -> RecordedSweep:
    """One recording: a sweep.json, or a folder holding one, measured under ``study`` (default:
    the study.yaml beside it or one folder up). A tune's run folder is read as its baseline's
    knee search under the run's own study, named after the run folder."""
    if is_run_folder(path):
        knee = path / BASELINE_KNEE
        if not knee.is_file():
            raise ConfigError([Problem(str(path), None, (), "the run measured no baseline yet")])
        recorded = load_recorded(knee, study or load_study(path / "study.yaml"))
        return RecordedSweep(path.name, recorded.study, recorded.result, recorded.source)
    sweep = _sweep_file(path)
    try:
        result = SweepResult.model_validate_json(sweep.read_bytes())
    except ValidationError as exc:
        problem = f"not a sweep: {first_problem(exc)}"
        raise ConfigError([Problem(str(sweep), None, (), problem)]) from exc
    study = (study or load_study(_study_beside(sweep))).model_copy(update={"engine": result.config})
    name = sweep.parent.name if sweep.name == "sweep.json" else sweep.stem
    return RecordedSweep(name, study, result, sweep)


def find_recorded(roots: list[Path]) -> list[RecordedSweep]:
    """Every recording under ``roots`` (files, folders, or folders of folders), by path."""
    found: list[RecordedSweep] = []
    for root in roots:
        if root.is_file() or (root / "sweep.json").is_file() or is_run_folder(root):
            found.append(load_recorded(root))
            continue
        if not root.is_dir():
            raise ConfigError([Problem(str(root), None, (), "no such file or folder")])
        runs = [p.parent for p in root.rglob(RUN_MARK) if (p.parent / BASELINE_KNEE).is_file()]
        inside = [load_recorded(p) for p in sorted([*root.rglob("sweep.json"), *runs])]
        if not inside:
            raise ConfigError([Problem(str(root), None, (), "holds no recording (sweep.json)")])
        found += inside
    return found


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a tune's run folder (its ledger is there)."""
    return (path / RUN_MARK).is_file()
