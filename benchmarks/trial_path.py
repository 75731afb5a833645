"""Which of kneepoint's modules one trial runs, from its Proposed to its Promoted.

Runs ``kneepoint tune`` on the small study (tests/fixtures/studies/small-tune.yaml, the
simulator's virtual clock, about 10 s) under a profiler hook that notes every kneepoint function
called while trial 1 is open, and prints the modules by package. The line to watch is the
orchestration's: the files of ``tune/`` and ``run/`` a reader follows to see a trial through
(issue "Step 19": 13 at 8c7e8ab, goal at most 8); the packages below them (measure, probes,
the pure libraries and the simulator) are printed for the whole picture.

    .venv/bin/python benchmarks/trial_path.py [--study FILE]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import versions

import kneepoint
from kneepoint.cli.main import main
from kneepoint.records import Event, Promoted, Proposed
from kneepoint.run import ledger

ROOT = Path(kneepoint.__file__).resolve().parent
SMALL = ROOT.parent / "tests" / "fixtures" / "studies" / "small-tune.yaml"
ORCHESTRATION = ("tune", "run")


class TrialTrace:
    """The modules called while the run's first trial is open (Proposed to its Promoted, or
    to the end of the run where it is never promoted)."""

    def __init__(self) -> None:
        self.trial: int | None = None
        self.done = False
        self.seen: collections.Counter[str] = collections.Counter()

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or self.trial is None:
            return
        name = frame.f_code.co_filename
        if name.startswith(str(ROOT)):
            self.seen[str(Path(name).relative_to(ROOT))] += 1

    def noted(self, event: Event) -> None:
        """Open the trace at the first Proposed, close it at that trial's Promoted."""
        if isinstance(event, Proposed) and self.trial is None and not self.done:
            self.trial = event.trial
        elif isinstance(event, Promoted) and event.trial == self.trial:
            self.trial, self.done = None, True


def _traced(study: Path, runs: Path, said: io.StringIO) -> tuple[TrialTrace, int]:
    trace, append = TrialTrace(), ledger.Ledger.append

    def noting(self: ledger.Ledger, event: Event) -> None:
        trace.noted(event)  # before the append: the event's own writing is the trial's
        append(self, event)

    ledger.Ledger.append = noting  # type: ignore[method-assign]
    sys.setprofile(trace.hook)
    threading.setprofile(trace.hook)
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            code = main(["tune", str(study), "--runs-dir", str(runs)])
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        ledger.Ledger.append = append  # type: ignore[method-assign]
    return trace, code


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--study", type=Path, default=SMALL)
    args = parser.parse_args()
    print(versions.line(), flush=True)
    said = io.StringIO()  # the tune's console: shown only where it failed
    with tempfile.TemporaryDirectory() as runs:
        trace, code = _traced(args.study, Path(runs), said)
    if code != 0:
        raise SystemExit(f"{said.getvalue()}kneepoint tune exited {code}")
    by_package: dict[str, list[str]] = collections.defaultdict(list)
    for module in sorted(trace.seen):
        package, _, rest = module.partition("/")
        by_package[package].append(rest or package)
    print(f"trial 1 of {args.study.name}: {len(trace.seen)} kneepoint modules run")
    for package, modules in sorted(by_package.items()):
        print(f"  {package:12} {len(modules):3}  {' '.join(modules)}")
    crossed = sum(len(by_package[p]) for p in ORCHESTRATION)
    print(f"orchestration ({' + '.join(ORCHESTRATION)}): {crossed} files (goal: at most 8)")


if __name__ == "__main__":
    main_()
