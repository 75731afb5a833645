"""Crash safety: `kneepoint tune` killed with SIGKILL at random moments, then resumed, ends with
the same run as one left alone.

1. The study (benchmarks/studies/kill-resume.yaml, simulated on the virtual clock) runs once
   uninterrupted: the reference, and its wall time.
2. Each kill starts the study afresh as a subprocess and SIGKILLs it at a moment drawn
   (seeded) from its own slice of the reference's wall time, so the kills spread over the
   whole run: start-up, baseline, screens, validations, the burst check, the report. The
   moment is placed by progress: as long after the same ledger event as in the reference, so
   a machine busier or idler than it was still has the same step cut. Then
   `kneepoint tune --resume RUN` until it exits 0.
3. The resumed run is compared with the reference: the same trials in the same order with the
   same outcomes, the same final incumbent and objective, best.yaml byte for byte, every trial
   proposed and screened exactly once, and a ledger that reads whole.
4. Nothing is left behind: no process started by the killed agent (found by a tag in its
   environment, which servers and watchdogs inherit), no server .pid file, no half-written
   file (*.tmp, *.partial).

Run: .venv/bin/python benchmarks/kill_resume.py [--kills 20] [--seed 1]
Other benchmarks call ``run_kill_resume`` and print ``KillResumeSummary.line()``.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kneepoint.records.ledger import Proposed, Screened
from kneepoint.run.folder import RunFolder
from kneepoint.run.ledger import Ledger, LedgerError
from kneepoint.run.state import RunState
from kneepoint.tune.decide import next_action
from kneepoint.tune.proposers import told

STUDY = Path(__file__).resolve().parent / "studies" / "kill-resume.yaml"
TAG = "KNEEPOINT_KILL_RESUME_TAG"
"""Set in the environment of every agent this module starts: what they leave running has it."""
MAX_RESUMES = 5
POLL_S = 0.01


def tune(
    target: Path, runs: Path, *, tag: str = "", resume: bool = False
) -> subprocess.Popen[bytes]:
    """`kneepoint tune` of a study (a new run under ``runs``) or of a run folder."""
    argv = [sys.executable, "-m", "kneepoint.cli.main", "tune"]
    argv += ["--resume", str(target)] if resume else [str(target)]
    env = {**os.environ, TAG: tag} if tag else None
    return subprocess.Popen([*argv, "--runs-dir", str(runs)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def run_folders(runs: Path) -> list[Path]:
    """Run folders (a folder still being created is hidden until it is whole)."""
    return [f for f in runs.iterdir() if not f.name.startswith(".")] if runs.exists() else []


def trial_rows(folder: Path) -> list[tuple[object, ...]]:
    """Each trial as (number, configuration, status, objective, validated, promoted)."""
    study = RunFolder(folder).study()
    state = RunState.replay(Ledger(folder / "ledger.jsonl").read(), study.objective)
    rows: list[tuple[object, ...]] = []
    for number in sorted(state.trials):
        trial = state.trials[number]
        outcome = told(trial)
        status, objective = (outcome.status, outcome.objective) if outcome else (None, None)
        rows.append((number, trial.proposal.key(), status, objective,
                     trial.validated is not None, trial.promoted is not None))  # fmt: skip
    return rows


def differences(run: Path, reference: Path) -> list[str]:
    """How ``run`` differs from ``reference`` (nothing: the same run)."""
    try:
        events = Ledger(run / "ledger.jsonl").read()
    except LedgerError as exc:
        return [f"ledger: {exc}"]
    found = []
    if trial_rows(run) != trial_rows(reference):
        found.append("trials differ")
    study = RunFolder(run).study()
    final, expected = (RunState.replay(Ledger(f / "ledger.jsonl").read(), study.objective)
                       for f in (run, reference))  # fmt: skip
    if (final.incumbent, final.incumbent_objective) != (
        expected.incumbent,
        expected.incumbent_objective,
    ):
        found.append("final incumbent differs")
    if final.finished != expected.finished:
        found.append("finished differently")
    best = [(f / "best.yaml").read_bytes() if (f / "best.yaml").exists() else None
            for f in (run, reference)]  # fmt: skip
    if best[0] != best[1]:
        found.append("best.yaml differs")
    proposed = [e.trial for e in events if isinstance(e, Proposed)]
    screened = [e.trial for e in events if isinstance(e, Screened)]
    if not proposed == screened == list(range(1, len(proposed) + 1)):
        found.append(f"trials lost or repeated: proposed {proposed}, screened {screened}")
    return found


def partial_files(runs: Path) -> list[Path]:
    """Half-written files: what an atomic write leaves if killed before its rename."""
    return [*runs.rglob("*.tmp"), *runs.rglob("*.partial")]


def orphans(runs: Path, tag: str, *, grace_s: float = 5.0) -> list[str]:
    """Live processes with ``tag`` in their environment, and server .pid files, left under
    ``runs`` once the run is done (after ``grace_s`` for watchdogs to act)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = [f"pid {pid}" for pid in tagged_processes(tag)]
        found += [str(p) for p in runs.rglob("*.pid")]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def tagged_processes(tag: str) -> list[int]:
    """Live (not zombie) processes whose environment holds ``TAG=tag``."""
    marker = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        if state != "Z" and marker in environ:
            found.append(int(entry.name))
    return found


def phase(folder: Path | None) -> str:
    """What the run was doing, read from its ledger: the action its next event records."""
    if folder is None:
        return "setup"
    study = RunFolder(folder).study()
    state = RunState.replay(Ledger(folder / "ledger.jsonl").read(), study.objective)
    action = next_action(state, study, datetime.now().astimezone())
    name = _PHASES[type(action).__name__]
    trial = getattr(action, "trial", None)
    return f"{name} {trial.trial}" if trial is not None else name


_PHASES = {
    "Start": "start", "MeasureBaseline": "baseline", "Propose": "propose", "Screen": "screen",
    "CheckQuality": "quality", "Validate": "validate", "Promote": "promote", "Stop": "stop",
    "CheckBurst": "burst", "Done": "report",
}  # fmt: skip


@dataclass(frozen=True)
class Kill:
    """One kill and what followed: the moment (s after start), the phase it cut, how many
    resumes finished the run, what differed from the reference and what was left behind."""

    at_s: float
    phase: str
    resumes: int
    differences: list[str]
    orphans: list[str]
    partial: list[str]

    @property
    def identical(self) -> bool:
        return not self.differences and not self.partial


@dataclass(frozen=True)
class KillResumeSummary:
    kills: list[Kill]
    reference_wall_s: float
    wall_s: float

    def table(self) -> list[str]:
        lines = [f"{'kill':>4} {'at_s':>6} {'phase':<12} {'resumes':>7} {'identical':>9} "
                 f"{'orphans':>7} {'partial':>7}  notes"]  # fmt: skip
        for n, k in enumerate(self.kills, 1):
            notes = "; ".join([*k.differences, *k.orphans, *k.partial])
            lines.append(f"{n:>4} {k.at_s:>6.2f} {k.phase:<12} {k.resumes:>7} "
                         f"{'yes' if k.identical else 'no':>9} {len(k.orphans):>7} "
                         f"{len(k.partial):>7}  {notes}")  # fmt: skip
        return lines

    def line(self) -> str:
        same = sum(k.identical for k in self.kills)
        left = sum(len(k.orphans) for k in self.kills)
        return f"kill-resume: {same}/{len(self.kills)} identical, {left} orphans"


def run_kill_resume(kills: int = 20, seed: int = 1, study: Path = STUDY) -> KillResumeSummary:
    """The reference run, then ``kills`` kill-and-resume runs of ``study``, each compared."""
    started = time.monotonic()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="kill-resume-") as work:
        root = Path(work)
        marks, reference_wall_s = _timeline(study, root / "reference")
        (reference,) = run_folders(root / "reference")
        done = []
        for n in range(kills):
            # Stratified: kill n falls in the n-th slice of the run, so all of it is covered.
            at_s = (n + rng.random()) / kills * reference_wall_s
            done.append(_kill_and_resume(study, root / f"kill-{n + 1:02d}", at_s, marks,
                                         reference))  # fmt: skip
    return KillResumeSummary(done, reference_wall_s, time.monotonic() - started)


class _LedgerWatch:
    """How many events the run under ``runs`` has recorded (re-read only when it grew)."""

    def __init__(self, runs: Path) -> None:
        self.runs, self._size, self.events = runs, -1, 0

    def poll(self) -> int:
        folders = run_folders(self.runs)
        ledger = folders[0] / "ledger.jsonl" if folders else None
        size = ledger.stat().st_size if ledger is not None and ledger.exists() else -1
        if ledger is not None and size != self._size:
            self._size, self.events = size, ledger.read_bytes().count(b"\n")
        return self.events


def _timeline(study: Path, runs: Path) -> tuple[list[float], float]:
    """Run ``study`` to the end: the seconds after its start at which its ledger reached 1, 2,
    ... events, and its wall time."""
    begun = time.monotonic()
    proc, watch, marks = tune(study, runs), _LedgerWatch(runs), list[float]()
    while proc.poll() is None:
        marks += [time.monotonic() - begun] * (watch.poll() - len(marks))
        time.sleep(POLL_S)
    if proc.returncode != 0:
        raise RuntimeError(f"the reference run of {study} failed")
    return marks, time.monotonic() - begun


def _kill_and_resume(
    study: Path, runs: Path, at_s: float, marks: list[float], reference: Path
) -> Kill:
    # The moment is placed by progress, not by the clock alone (a loaded machine runs slower):
    # after the event the reference had recorded last by then, as long after it as there.
    events = bisect.bisect_right(marks, at_s)
    after_s = at_s - (marks[events - 1] if events else 0.0)
    tag = runs.name + f"-{os.getpid()}"
    while not _killed(tune(study, runs, tag=tag), _LedgerWatch(runs), events, after_s):
        # Finished before the moment came (this run went faster than the reference's):
        # start over and kill it a little earlier.
        for folder in run_folders(runs):
            shutil.rmtree(folder)
        after_s *= 0.9
    folders = run_folders(runs)
    cut = phase(folders[0] if folders else None)
    resumes, finished = 0, False
    while resumes < MAX_RESUMES and not finished:
        resumes += 1
        folders = run_folders(runs)
        target = folders[0] if folders else study  # killed before the folder existed
        finished = tune(target, runs, tag=tag, resume=bool(folders)).wait() == 0
    (folder,) = run_folders(runs)
    found = differences(folder, reference)
    if not finished:
        found.insert(0, f"no resume finished the run in {MAX_RESUMES} tries")
    return Kill(at_s, cut, resumes, found, orphans(runs, tag),
                [str(p) for p in partial_files(runs)])  # fmt: skip


def _killed(
    proc: subprocess.Popen[bytes], watch: _LedgerWatch, events: int, after_s: float
) -> bool:
    """SIGKILL ``proc`` ``after_s`` after its ledger holds ``events`` events; False if it
    exited before that."""
    while watch.poll() < events and proc.poll() is None:
        time.sleep(POLL_S)
    if proc.poll() is None:
        try:
            proc.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
    if proc.returncode != 0:
        raise RuntimeError(f"kneepoint tune exited {proc.returncode} before it was killed")
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--study", type=Path, default=STUDY)
    args = parser.parse_args()
    import versions  # here: tests import this module as benchmarks.kill_resume

    print(versions.line(), flush=True)
    summary = run_kill_resume(args.kills, args.seed, args.study)
    print(f"study {args.study.name}: reference run {summary.reference_wall_s:.1f} s")
    print("\n".join(summary.table()))
    print(summary.line())
    print(f"wall time {summary.wall_s:.0f} s")


if __name__ == "__main__":
    main()
