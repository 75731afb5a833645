"""Scale-out: one tuning run on 1, 8, 32 and 64 simulated GPUs (virtual clock), the pool driver
(`kneepoint tune --gpus N`'s decisions, ``kneepoint.tune.dispatch``) beside the sequential
`kneepoint tune` of the same study.

Per study and GPU count it prints the trials, the device-hours spent (every GPU's busy time,
summed), the critical path (how long the run takes with its steps side by side, in the
simulator's device time; for the sequential run its device time), the critical path to the
winner's promotion and its ratio to the sequential run's (``x seq``) and to the sequential
run's whole length (``x seq run``), the share of the pool's GPU time idle over the run (the
GPUs are Ray's between steps: a tune holds none while it waits), and the winner measured again
by the knee search `benchmarks/regret.py` reads every configuration with (so the rows
compare), with its regret against that script's grid optimum where ``--cells`` holds the grid
(one seed). Wall time on this machine says nothing here: the simulated GPUs share its cores.

Run: .venv/bin/python benchmarks/scaleout.py [--studies quickstart,rag,llama70b-4gpu]
     [--gpus 8,32,64] [--cells /tmp/cells.jsonl]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

import versions
from regret import measure
from study_grids import STUDIES, grid, study_of

from kneepoint.config import knob_catalogue, load_study
from kneepoint.measure import LogProgress
from kneepoint.records import EngineConfig, Event, Placed, Promoted, StudySpec
from kneepoint.run import RunFolder, RunState
from kneepoint.tune import Tuner
from kneepoint.tune.pool_loop import PoolTuner
from kneepoint.tune.virtual_pool import VirtualPool

REPO = Path(__file__).resolve().parent.parent
EXTRA = {"llama70b-4gpu": REPO / "configs" / "studies" / "llama70b-4gpu.yaml"}
"""Studies beside benchmarks/study_grids.py's: a TP 2 start searching tensor parallelism."""


@dataclass(frozen=True)
class Row:
    gpus: int
    trials: int
    device_h: float
    critical_h: float
    to_winner_h: float
    idle: float | None
    winner: EngineConfig
    finished: str
    wall_s: float


def _study(name: str) -> StudySpec:
    return load_study(EXTRA[name]) if name in EXTRA else study_of(name)


def sequential(study: StudySpec, runs: Path) -> Row:
    started = time.perf_counter()
    folder = RunFolder.create(runs, study, datetime.now().astimezone())
    state = Tuner(folder, study, LogProgress(), knob_catalogue()).run()
    events = list(folder.ledger.recover())
    spent, to_winner = 0.0, 0.0
    for event in events:
        spent += getattr(event, "device_s", 0.0)
        if isinstance(event, Promoted):
            to_winner = spent
    gpus = study.engine.gpu_count  # its servers' GPUs: the start's (a move to TP 4 is priced at 2)
    return Row(
        gpus,
        state.trials_run,
        state.device_s * gpus / 3600,
        state.device_s / 3600,
        to_winner / 3600,
        None,
        state.incumbent or study.engine,
        _reason(state),
        time.perf_counter() - started,
    )


def pooled(study: StudySpec, runs: Path, gpus: int) -> Row:
    started = time.perf_counter()
    folder = RunFolder.create(runs, study, datetime.now().astimezone())
    pool = VirtualPool(gpus)
    state = PoolTuner(folder, study, LogProgress(), knob_catalogue(), pool).run()
    landed = {key: end for key, _, end in pool.landings}
    to_winner = _winner_landed(list(folder.ledger.recover()), landed)
    idle = 1.0 - pool.busy_s / (pool.clock_s * gpus) if pool.clock_s else None
    return Row(
        gpus,
        state.trials_run,
        pool.busy_s / 3600,
        pool.clock_s / 3600,
        to_winner / 3600,
        idle,
        state.incumbent or study.engine,
        _reason(state),
        time.perf_counter() - started,
    )


def _winner_landed(events: list[Event], landed: dict[str, float]) -> float:
    """When the run had its winner: the landing the final promotion followed (the baseline's
    last, with none)."""
    last, at = 0.0, 0.0
    for event in events:
        if isinstance(event, Placed):
            last = landed.get(event.step, last)
        if isinstance(event, Promoted):
            at = last
    return at or next((landed[e.step] for e in events if isinstance(e, Placed)), 0.0)


def _reason(state: RunState) -> str:
    return state.finished.reason if state.finished is not None else "unfinished"


def _optimum(name: str, cells: Path | None) -> float | None:
    """The grid's best objective from ``--cells`` (benchmarks/regret.py's file), if it holds
    every cell of the study's grid."""
    if cells is None or not cells.exists() or name not in STUDIES:
        return None
    found = {}
    for line in cells.read_text().splitlines():
        row = json.loads(line)
        if row["study"] == name and row.get("seed_offset", 0) == 0:
            found[row["config"]] = row["objective"]
    values = [found.get(c.fingerprint()) for c in grid(name)]
    return None if any(v is None for v in values) else max(v for v in values if v is not None)


def study_rows(name: str, counts: list[int], cells: Path | None) -> None:
    """Each row printed as soon as it is measured: a study's rows take up to an hour here."""
    study = _study(name)
    optimum = _optimum(name, cells)
    print(f"{name}: start {study.engine.gpu_count} GPU(s) a server", flush=True)
    print("  GPUs  trials  device-h  critical-h  to-winner-h (x seq) (x seq run)  idle"
          "  winner (re-measured)  regret  stop  wall-s", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as runs:
        base = sequential(study, Path(runs))
        _print_row(name, study, base, base, optimum)
        for gpus in counts:
            _print_row(name, study, pooled(study, Path(runs), gpus), base, optimum)


def _print_row(name: str, study: StudySpec, row: Row, base: Row, optimum: float | None) -> None:
    cell = measure(name, row.winner) if name in STUDIES else None  # no grid: the ledger's
    regret = f"{1 - cell.objective / optimum:.1%}" if cell and optimum else "-"
    again = f"{cell.objective:8.2f}" if cell else "       -"
    ratio = row.to_winner_h / base.to_winner_h if base.to_winner_h else float("nan")
    of_run = row.to_winner_h / base.critical_h if base.critical_h else float("nan")
    idle = "-" if row.idle is None else f"{row.idle:.0%}"
    label = "seq" if row is base else str(row.gpus)
    print(f"  {label:>4}  {row.trials:>6}  {row.device_h:8.2f}  {row.critical_h:10.2f}  "
          f"{row.to_winner_h:8.2f} ({ratio:.2f}x) ({of_run:.2f}x)  {idle:>5}  {again}  "
          f"{regret:>6}  {row.finished}  {row.wall_s:.0f}", flush=True)  # fmt: skip
    print(f"        winner: {row.winner.changes_from(study.engine) or 'the start'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", default="quickstart,rag,llama70b-4gpu")
    parser.add_argument("--gpus", default="8,32,64")
    parser.add_argument("--cells", type=Path, help="benchmarks/regret.py's --cells file")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    for name in args.studies.split(","):
        try:
            study_rows(name, [int(g) for g in args.gpus.split(",")], args.cells)
        except Exception as error:  # a study that fails is said, never scored
            print(f"{name}: failed: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    main()
