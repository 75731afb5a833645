"""The run folder ``runs/<study>-<timestamp>/``: what a tuning run leaves on disk.

    study.yaml          the resolved study, every default filled in
    ledger.jsonl        every decision and measurement, append-only (kneepoint.run.ledger)
    trials/NNN-<fp>/    per trial: sweeps (JSON), server logs, per-point request records
                        (JSON lines, gzip) and /metrics snapshots
    optuna.db           the Optuna storage (SQLite; optuna-dashboard opens it)
    report.md, report.html, plots/
    best.yaml           the winning engine configuration
    best-command.txt    the exact `vllm serve` command of the winner
    .lock               locked by the agent working on the run (kneepoint.run.lock)

Files other than the ledger are written whole or not at all: a temporary file beside, renamed
into place. What a killed agent leaves half-written is only ever such a temporary file, and the
next agent to lock the folder deletes them.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shlex
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

import yaml
from pydantic import ValidationError

from kneepoint.config import ConfigError, Problem, render_loc
from kneepoint.load import filled_node
from kneepoint.records import (
    EngineConfig,
    PointArtifacts,
    RunStarted,
    StudySpec,
)
from kneepoint.run.ledger import Ledger, LedgerError
from kneepoint.run.lock import RunLock, try_lock


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()
"""What ``open`` would give a new file (0644 under umask 022), so that others can read a run
folder's report, where mkstemp's 0600 would shut them out."""


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temporary file beside it, then a rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # named by the file asked for, not its temporary neighbour
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunFolderError(ConfigError, ValueError):
    """A folder the user named that is not a kneepoint run (or not this study's)."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__([Problem(str(path), None, (), message)])
        self.path, self.message = path, message


class RunFolder:
    def __init__(self, path: Path, lock: RunLock | None = None) -> None:
        self.path, self.lock = path, lock
        self.ledger = Ledger(path / "ledger.jsonl")

    @classmethod
    def create(cls, runs_dir: Path, study: StudySpec, now: datetime) -> RunFolder:
        """A new run folder, locked by this agent from the moment it exists."""
        _discard_abandoned_builds(runs_dir, now)
        stem = f"{study.name}-{now.strftime('%Y%m%d-%H%M%S')}"
        path, n = runs_dir / stem, 1
        # Built beside and renamed into place: a run folder exists whole or not at all.
        partial = runs_dir / f".{path.name}.partial"
        while path.exists() or partial.exists():  # runs of a study started the same second
            n += 1
            path = runs_dir / f"{stem}-{n}"
            partial = runs_dir / f".{path.name}.partial"
        partial.mkdir(parents=True)
        lock = RunLock.take(partial, now)
        try:
            write_atomically(partial / "study.yaml", _yaml(study.model_dump(mode="json")))
            (partial / "ledger.jsonl").touch()
            partial.rename(path)
        except BaseException:
            lock.release()
            raise
        lock.moved_to(path)
        return cls(path, lock)

    @classmethod
    def existing(cls, path: Path) -> RunFolder:
        if not (path / "study.yaml").is_file() or not (path / "ledger.jsonl").is_file():
            raise RunFolderError(
                path, "not a kneepoint run folder (no study.yaml and ledger.jsonl)"
            )
        return cls(path)

    def take_lock(self, now: datetime) -> None:
        """Lock the folder for this agent (``RunLockedError`` if another one holds it), then
        delete what a killed agent left half-written: nobody else writes here now."""
        self.lock = RunLock.take(self.path, now)
        for tmp in self.path.rglob("*.tmp"):
            tmp.unlink(missing_ok=True)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def check_resumable(self) -> None:
        """Refuse a folder whose ledger cannot be what its trials came from: an empty ledger
        beside trial folders would silently start the run over them."""
        trials = self.path / "trials"
        found = sorted(p.name for p in trials.iterdir()) if trials.is_dir() else []
        if found and self.ledger.is_empty():
            raise RunFolderError(
                self.path,
                f"ledger.jsonl is empty but trials/ holds {len(found)} trial folder(s) "
                f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}): the run's record "
                "is lost; restore ledger.jsonl from a backup, or start a new run from the study",
            )

    def check_study_unchanged(self, study: StudySpec) -> None:
        """Refuse a run whose study.yaml was edited since it started: its baseline and trials
        were measured under the study as it was."""
        try:
            events = self.ledger.recover()
        except LedgerError:
            return  # a damaged ledger is named, with the way forward, when the run reads it
        started = next((e for e in events if isinstance(e, RunStarted)), None)
        if started is None or started.study_sha256 in (None, study_digest(study)):
            return
        raise RunFolderError(
            self.path,
            "study.yaml was changed since the run started: its baseline and trials were "
            "measured under the study as it was; put the file back, or start a new run from "
            "the edited study (kneepoint tune STUDY.yaml)",
        )

    def study(self) -> StudySpec:
        """The run's own resolved study (a resumed run keeps it, whatever the file says now)."""
        try:
            text = (self.path / "study.yaml").read_text(encoding="utf-8")
            return StudySpec.model_validate(yaml.safe_load(text))
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise RunFolderError(self.path, f"study.yaml cannot be read: {reason}") from exc
        except yaml.YAMLError as exc:
            raise RunFolderError(
                self.path, f"study.yaml is damaged: {str(exc).splitlines()[0]}"
            ) from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            where = render_loc(first["loc"]) or "its top level"
            raise RunFolderError(
                self.path,
                f"study.yaml is damaged: {where}: {first['msg']} ({exc.error_count()} problem(s))",
            ) from exc

    def set_optuna_aside(self, tag: str) -> None:
        """Move the Optuna storage aside (``optuna.db.<tag>``): after a ledger repair it holds
        trials the ledger no longer has, and the search is rebuilt from the ledger instead."""
        storage = self.path / "optuna.db"
        if storage.exists():
            storage.rename(self.path / f"optuna.db.{tag}")

    @property
    def optuna_url(self) -> str:
        return f"sqlite:///{(self.path / 'optuna.db').resolve()}"

    def trial_dir(self, trial: int, config: EngineConfig) -> Path:
        name = "000-baseline" if trial == 0 else f"{trial:03d}-{config.fingerprint()[:8]}"
        path = self.path / "trials" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write_best(self, study: StudySpec, config: EngineConfig) -> None:
        served = filled_node(study, config)
        body = {"engine": served.model_dump(mode="json", exclude_defaults=True)}
        write_atomically(self.path / "best.yaml", _yaml(body))
        write_atomically(self.path / "best-command.txt", serve_command(study, config) + "\n")


def write_point(folder: Path, label: str, artifacts: PointArtifacts) -> None:
    """One measured point's files in ``folder``/points: its request records (gzip JSON
    lines), the point, and the ``/metrics`` snapshots before and after it (a retake's stem
    says which attempt it was)."""
    again = f"-retake{artifacts.attempt}" if artifacts.attempt else ""
    stem = f"{label}-r{artifacts.repeat}-{artifacts.rate_rps:.4g}rps{again}"
    points = folder / "points"
    points.mkdir(parents=True, exist_ok=True)
    lines = "".join(r.model_dump_json() + "\n" for r in artifacts.records)
    tmp = points / f".{stem}.requests.jsonl.gz.tmp"
    # zlib's default level: the quickstart's knee point (2.1 MB of records) packs to 132 kB in
    # 23 ms where gzip's default 9 took 32 ms for 131 kB
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6) as handle:
        handle.write(lines)
    tmp.replace(points / f"{stem}.requests.jsonl.gz")
    write_atomically(points / f"{stem}.point.json", artifacts.point.model_dump_json() + "\n")
    for when, text in zip(("before", "after"), artifacts.metrics_text, strict=False):
        write_atomically(points / f"{stem}.metrics-{when}.prom", text)


def _discard_abandoned_builds(runs_dir: Path, now: datetime) -> None:
    """Delete the half-built folders of agents killed while creating a run (one that is still
    being built is locked by its agent, and left alone)."""
    for partial in runs_dir.glob(".*.partial") if runs_dir.is_dir() else ():
        lock = try_lock(partial, now) if partial.is_dir() else None
        if lock is not None:
            shutil.rmtree(partial, ignore_errors=True)
            lock.release()


def serve_command(study: StudySpec, config: EngineConfig) -> str:
    """The exact command that serves ``config`` on the study's GPUs (``filled_node``),
    quoted for a POSIX shell."""
    return shlex.join(study.backend.serve_argv(filled_node(study, config)))


def _yaml(body: object) -> str:
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


def study_digest(study: StudySpec) -> str:
    """The resolved study's SHA-256 (the ledger's ``RunStarted.study_sha256``): the same for
    the same resolved study, whatever the file's spacing or comments."""
    return hashlib.sha256(study.model_dump_json().encode()).hexdigest()
