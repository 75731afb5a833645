"""Scale-out: one tuning run shared by 1, 3 and 6 `kneepoint worker`s on simulated GPUs
(virtual clock) through a real PostgreSQL, beside a sequential `kneepoint tune` of the same
study.

For each, it prints the trials, the batches the workers planned, the device-hours spent (every
GPU's time, summed), the critical path (each batch's longest task, summed: how long the run
takes with its workers side by side, in the simulator's device time), the critical path up to
the winner's promotion ("to winner": when the run had what it ends with) and the winner's
objective. The sequential run's critical path is its device time. Wall time on this machine
says nothing here: the simulated GPUs share its CPU cores.

Run: .venv/bin/python benchmarks/workers.py [--study configs/studies/quickstart.yaml]
     [--workers 1,3,6] [--set tuning.proposer=optuna ...] [--batches]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the test suite's PostgreSQL server (tests/support/postgres_server.py)
sys.path.insert(0, str(REPO))

from kneepoint.config import load_study  # noqa: E402
from kneepoint.load.objective import rules  # noqa: E402
from kneepoint.records.actions import JoinBaseline, Promote  # noqa: E402
from kneepoint.records.ledger import Baseline, Promoted  # noqa: E402
from kneepoint.records.objective import Objective  # noqa: E402
from kneepoint.run.folder import RunFolder  # noqa: E402
from kneepoint.run.state import RunState  # noqa: E402
from kneepoint.workers.shared_study import Attempts, SharedStudy  # noqa: E402
from kneepoint.workers.state import shared_state, side_by_side  # noqa: E402
from tests.support.postgres_server import MISSING, PostgresServer, find_bindir, running_server  # noqa: E402

CLI = [sys.executable, "-m", "kneepoint.cli.main"]


@dataclass(frozen=True)
class Row:
    label: str
    trials: int
    batches: int
    device_h: float
    critical_h: float
    to_winner_h: float
    """The critical path up to the winner's promotion (the baseline's end with none)."""
    objective: float | None
    finished: str
    batches_seen: tuple[str, ...] = ()
    """Each batch's tasks and their device time (``--batches``)."""


def _shared(
    server: PostgresServer, study: Path, overrides: list[str], workers: int, folder: Path
) -> Row:
    url = server.create_database(f"w{workers}_{uuid.uuid4().hex[:8]}")
    argv = [*CLI, "worker", "--storage", url, "--study", str(study), "--runs-dir",
            str(folder / f"w{workers}"), "--heartbeat-s", "2", "--grace-s", "30",
            *_sets(overrides)]  # fmt: skip
    processes = [subprocess.Popen([*argv, "--gpu", str(gpu)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for gpu in range(workers)]  # fmt: skip
    codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"workers exited {codes}")
    spec = load_study(study, overrides)
    shared = SharedStudy(url, spec.name, heartbeat_s=2, grace_s=30, max_retry=2)
    now = datetime.now().astimezone()
    attempts = shared.attempts(now)
    final = shared_state(spec, shared.started_at(), attempts, shared.finished())
    state = final.state
    assert state.finished is not None
    won = state.promotions[-1].trial if state.promotions else 0
    # the batch that made the winner: the baseline's, or its promotion's
    found = max(
        a.task.batch
        for a in attempts
        if a.task.trial == won and isinstance(a.task.action, JoinBaseline | Promote)
    )
    before = [a for a in attempts if a.task.batch <= found]
    to_winner = shared_state(spec, shared.started_at(), before, None).makespan_s
    return Row(f"{workers} worker{'s' if workers > 1 else ''}", state.trials_run,
               final.batches, state.device_s / 3600, final.makespan_s / 3600,
               to_winner / 3600, state.incumbent_objective, state.finished.reason,
               _batch_lines(attempts, spec.objective))  # fmt: skip


def _batch_lines(attempts: list[Attempts], objective: Objective) -> tuple[str, ...]:
    """Each batch: its hours on the critical path, then every task's device hours (and a
    validation repeat's gain over the incumbent)."""
    lines = []
    for batch in sorted({a.task.batch for a in attempts}):
        mine = [a for a in attempts if a.task.batch == batch]
        tasks = ", ".join(f"{a.task.key} {a.result.device_s / 3600 if a.result else 0:.2f}"
                          f"{_gain(a, objective)}" for a in mine)  # fmt: skip
        lines.append(f"  batch {batch:>2} {side_by_side(mine) / 3600:.2f} h: {tasks}")
    return tuple(lines)


def _gain(attempts: Attempts, objective: Objective) -> str:
    """The " (+12%)" of a validation part's challenger over its incumbent, pair by pair."""
    part = attempts.result.part if attempts.result is not None else None
    if part is None or part.incumbent is None or part.challenger is None:
        return ""
    rule = rules(objective)
    pairs = zip(rule.by_repeat(part.incumbent), rule.by_repeat(part.challenger), strict=False)
    return " (" + ", ".join(f"{c / i - 1:+.0%}" for i, c in pairs if i > 0) + ")"


def _sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def _sequential(study: Path, overrides: list[str], folder: Path) -> Row:
    """A sequential tune; its steps count the burst check, as the workers' batches do."""
    runs = folder / "sequential"
    subprocess.run([*CLI, "tune", str(study), "--runs-dir", str(runs), *_sets(overrides)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    [run] = list(runs.iterdir())
    events = RunFolder.existing(run).ledger.recover()
    objective = load_study(study, overrides).objective
    state = RunState.replay(events, objective)
    assert state.finished is not None
    hours = state.device_s / 3600
    steps = 1 + sum(1 + (t.validated is not None) for t in state.trials.values())
    steps += state.burst is not None
    found = max(i for i, e in enumerate(events) if isinstance(e, Baseline | Promoted))
    to_winner = RunState.replay(events[: found + 1], objective).device_s / 3600
    return Row("sequential tune", state.trials_run, steps, hours, hours, to_winner,
               state.incumbent_objective, state.finished.reason)  # fmt: skip


def _print(rows: list[Row]) -> None:
    print(f"{'run':<16} {'trials':>6} {'batches':>7} {'device-h':>9} {'critical-h':>10} "
          f"{'speed-up':>8} {'to winner':>9} {'objective':>9}  finished")  # fmt: skip
    base = rows[0].critical_h
    for r in rows:
        objective = "-" if r.objective is None else f"{r.objective:.2f}"
        print(f"{r.label:<16} {r.trials:>6} {r.batches:>7} {r.device_h:>9.2f} "
              f"{r.critical_h:>10.2f} {base / r.critical_h:>7.2f}x {r.to_winner_h:>9.2f} "
              f"{objective:>9}  {r.finished}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path, default=REPO / "configs/studies/quickstart.yaml")
    parser.add_argument("--workers", default="1,3,6")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="override a study field, as kneepoint tune --set")  # fmt: skip
    parser.add_argument("--batches", action="store_true",
                        help="print each shared run's batches: tasks and device hours")  # fmt: skip
    parser.add_argument("--keep", type=Path,
                        help="keep the runs' folders here (default: a temporary one)")  # fmt: skip
    args = parser.parse_args()
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit(MISSING)
    with tempfile.TemporaryDirectory() as tmp, running_server(bindir) as server:
        folder = args.keep or Path(tmp)
        rows = [_sequential(args.study, args.overrides, folder)]
        for n in (int(w) for w in args.workers.split(",")):
            rows.append(_shared(server, args.study, args.overrides, n, folder))
            print(f"... {n} workers done", file=sys.stderr, flush=True)
    print(f"study: {args.study} {' '.join(_sets(args.overrides))}")
    _print(rows)
    for row in rows[1:] if args.batches else ():
        print(f"{row.label}:", *row.batches_seen, sep="\n")


if __name__ == "__main__":
    main()
