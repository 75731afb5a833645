"""Faults survived: every failure the simulator can inject, against a whole `kneepoint tune` run,
then SIGKILLs of the agent itself (benchmarks/kill_resume.py).

Each case runs benchmarks/studies/faults.yaml with one ``backend.faults`` setting, on the
in-process engine (virtual clock) or on launched ``kneepoint sim serve`` processes (``--http``:
the real process group, port, health check, classifier and watchdog; minutes per case, one
trial at most, the faults on the baseline's first server). A case
is read from what the run left:

- injected: the faults that happened (the server logs' and agent log's ``kneepoint-fault:``
  lines; failed requests counted in the kept request records);
- survived: the agent ended the run itself with every trial concluded: exit 0, or exit 1
  where the baseline could not be measured (the ledger says why);
- lost: trials proposed and never concluded, and, where the run did not finish, the trials
  of the fault-free run it did not conclude (a trial that failed with its cause recorded is
  not lost; nor is budget left unspent by a run that stopped on its own decision);
- trials: trials concluded, against the fault-free run's;
- orphans: processes the agent started that outlived it, and server .pid files left;
- recorded: what the ledger says of it (a trial's failure, a sweep re-run, failures counted
  against goodput, points measured without the engine's or the GPU's signals).

Run: .venv/bin/python benchmarks/faults.py [--http] [--kills 20] [--only NAME,...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import versions
from kill_resume import TAG, orphans, partial_files, run_folders, run_kill_resume

from kneepoint.records.faults import MARKER
from kneepoint.records.ledger import Baseline, Finished, Screened, Validated
from kneepoint.records.sweep import SweepResult
from kneepoint.run.folder import RunFolder
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState

STUDY = Path(__file__).resolve().parent / "studies" / "faults.yaml"
FIRST_SCREEN = [3]
"""Launch 3 is trial 1's screen (the baseline's knee search and repeats are 1 and 2)."""


@dataclass(frozen=True)
class Case:
    name: str
    faults: dict[str, object]


CASES = (
    Case("startup OOM", {"startup_oom": True, "launches": FIRST_SCREEN}),
    Case("slow start (20 s)", {"slow_start_s": 20, "launches": FIRST_SCREEN}),
    Case("crash mid-sweep", {"crash_after_s": 5, "launches": FIRST_SCREEN}),
    Case("crash, and again on retry", {"crash_after_s": 5, "launches": [3, 4]}),
    Case("hang mid-sweep", {"hang_after_s": 5, "launches": FIRST_SCREEN}),
    Case("5xx (0.3% of requests)", {"error_5xx_fraction": 0.003}),
    Case("connection reset (0.3%)", {"reset_fraction": 0.003}),
    Case("stream cut mid-response (0.3%)", {"stream_cut_fraction": 0.003}),
    Case("malformed /metrics", {"malformed_metrics": True}),
    Case("NVML absent", {"nvml": "absent"}),
    Case("NVML failing", {"nvml": "failing"}),
)


@dataclass(frozen=True)
class Result:
    case: Case
    clock: str
    exit_code: int
    injected: int
    trials: int
    survived: bool
    lost: int
    orphans: int
    recorded: str
    wall_s: float

    def row(self) -> str:
        return (f"{self.case.name:<32} {self.clock:<7} {self.injected:>8} {self.trials:>6} "
                f"{'yes' if self.survived else 'NO':>8} {self.lost:>5} {self.orphans:>7}  "
                f"{self.wall_s:>5.0f}  {self.recorded}")  # fmt: skip


HEADER = (f"{'fault':<32} {'backend':<7} {'injected':>8} {'trials':>6} {'survived':>8} {'lost':>5} "
          f"{'orphans':>7}  {'wall':>5}  recorded as")  # fmt: skip


def tune(case: Path, tag: str, clock: str, faults: dict[str, object] | None) -> int:
    """One whole run of the study under ``case``/runs (its logs beside); its exit code."""
    argv = [sys.executable, "-m", "kneepoint.cli.main", "tune", str(STUDY), "--runs-dir",
            str(case / "runs"), "--log-file", str(case / "agent.jsonl"), "--set",
            f"backend.clock={clock}"]  # fmt: skip
    if faults is not None:
        argv += ["--set", f"backend.faults={json.dumps(faults)}"]
    if clock == "http":  # a trial at most: each server start costs seconds of real time
        argv += ["--set", "budget.max_trials=1", "--set", "tuning.burst.enabled=false"]
    case.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(argv, env={**os.environ, TAG: tag}, capture_output=True,
                          text=True, check=False)  # fmt: skip
    (case / "stderr.txt").write_text(done.stderr)
    return done.returncode


def concluded(folder: Path) -> tuple[list[int], list[int]]:
    """Trials concluded (an outcome recorded, failed or not), and those proposed but not."""
    study = RunFolder(folder).study()
    state = RunState.replay(Ledger(folder / "ledger.jsonl").read(), study.objective)
    done = sorted(n for n, t in state.trials.items() if t.next_step() is None)
    return done, sorted(set(state.trials) - set(done))


def injected(case: Path) -> int:
    """Marker lines in every server log and the agent's log, or the failed requests kept
    where they are more (the in-process engine logs request faults at debug level only)."""
    lines = 0
    for log in [*case.rglob("server*.log"), case / "agent.jsonl"]:
        if log.exists():
            lines += sum(MARKER in line for line in log.read_text(errors="replace").splitlines())
    failed = 0
    for records in case.rglob("*.requests.jsonl.gz"):
        with gzip.open(records, "rt", encoding="utf-8") as handle:
            failed += sum('"error":"HTTP 5' in r or "RemoteProtocolError" in r for r in handle)
    # over HTTP a failed request shows twice: the server's line and the client's record
    return max(lines, failed)


def recorded(folder: Path) -> str:
    """What the ledger says of the faults: failures, re-runs, failed requests, lost signals."""
    notes: list[str] = []
    sweeps: list[SweepResult] = []
    for event in Ledger(folder / "ledger.jsonl").read():
        if isinstance(event, Screened) and event.outcome.status != "ok":
            notes.append(f"trial {event.trial} {event.outcome.status}: {event.outcome.detail}")
        if isinstance(event, Validated) and event.failure is not None:
            notes.append(f"trial {event.trial} {event.failure.status}: {event.failure.detail}")
        if isinstance(event, Baseline):
            sweeps += [event.knee, event.repeats]
        if isinstance(event, Finished) and event.reason == "baseline_failed":
            notes.append(f"baseline failed: {event.detail}")
        sweeps += [s for s in _sweeps(event) if s is not None]
    reruns = [cause for s in sweeps for cause in s.retried]
    points = [p.point for s in sweeps for p in s.points]
    failed = sum(p.failed for p in points)
    blind = sum(p.signals.metric_samples == 0 for p in points)
    no_gpu = sum(p.signals.gpu_samples == 0 and p.signals.gpu_util_pct is None for p in points)
    if reruns:
        notes.append(f"{len(reruns)} sweep(s) re-run on a fresh server after {reruns[0]}")
    if failed:
        notes.append(f"{failed} failed requests counted against goodput")
    if blind == len(points) and points:
        notes.append("every point measured without the engine's signals")
    elif no_gpu == len(points) and points:
        notes.append("every point measured without GPU signals")
    return "; ".join(n[:110] for n in notes) or "nothing"


def _sweeps(event: object) -> list[SweepResult | None]:
    if isinstance(event, Screened):
        return [event.sweep]
    if isinstance(event, Validated):
        return [event.incumbent, event.challenger]
    return []


def run_case(case: Case, clock: str, root: Path, expected: list[int]) -> Result:
    where, tag = root / f"{clock}-{len(list(root.iterdir()))}", secrets.token_hex(6)
    faults = dict(case.faults)
    if clock == "http" and "launches" in faults:
        faults["launches"] = [1]  # the baseline's first server: HTTP runs are one trial at most
    start = time.monotonic()
    code = tune(where, tag, clock, faults)
    wall = time.monotonic() - start
    left = orphans(where, tag)
    folders = run_folders(where / "runs")
    if len(folders) != 1:
        said = (where / "stderr.txt").read_text()[-200:]
        return Result(case, clock, code, injected(where), 0, False, len(expected), len(left),
                      f"no run folder: {said}", wall)  # fmt: skip
    done, dangling = concluded(folders[0])
    finished = RunState.replay(Ledger(folders[0] / "ledger.jsonl").read()).finished
    # a run that stopped on its own decision (nothing worth trying) spent less, lost nothing
    lost = len(dangling) + (len(set(expected) - set(done)) if finished is None else 0)
    whole = not dangling and not partial_files(where)
    # a baseline that cannot be measured ends the run, said so in the ledger, exit 1
    ended = finished is not None and (code == 0 or (code == 1 and finished.reason ==
                                                    "baseline_failed"))  # fmt: skip
    survived = ended and whole
    return Result(case, clock, code, injected(where), len(done), survived, lost, len(left),
                  recorded(folders[0]), wall)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="also on launched sim servers")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs of the agent")
    parser.add_argument("--only", help="comma-separated case names (prefixes)")
    parser.add_argument("--keep", type=Path, help="leave every run under this folder")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    cases = [c for c in CASES if not args.only
             or any(c.name.startswith(n) for n in args.only.split(","))]  # fmt: skip
    clocks = ["virtual", "http"] if args.http else ["virtual"]
    results = []
    with tempfile.TemporaryDirectory(prefix="kp-faults-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for clock in clocks:
            reference = root / f"reference-{clock}"
            tune(reference, secrets.token_hex(6), clock, None)
            expected, _ = concluded(run_folders(reference / "runs")[0])
            print(f"{clock}: the fault-free run concludes trials {expected}", flush=True)
            print(HEADER, flush=True)
            for case in cases:
                results.append(run_case(case, clock, root, expected))
                print(results[-1].row(), flush=True)
    survived = sum(r.survived for r in results)
    print(f"faults: {survived}/{len(results)} survived, {sum(r.lost for r in results)} "
          f"trials lost, {sum(r.orphans for r in results)} orphans")  # fmt: skip
    if args.kills > 0:
        summary = run_kill_resume(kills=args.kills)
        print("\n".join(summary.table()))
        print(summary.line())


if __name__ == "__main__":
    main()
