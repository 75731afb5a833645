"""Regret: how far the real `kneepoint tune` ends from the best configuration of its own knobs.

For each study, the real command (`kneepoint tune`, a subprocess, its stop included) runs on
the virtual clock; then every configuration of a grid over the knobs the study searches is
measured by the same knee search `kneepoint sweep` runs (`study_knee_search` on the study's
terms, screen-length points), and so are the tune's start and winner, so that start, winner
and optimum are read the same way. Printed per study: start, winner (trials, device-hours of
the budget, why it stopped), the grid's optimum and where, regret = 1 - winner / optimum
(negative where the winner beat the grid: a value off the grid), and the tune's device time
against the grid's.

Run: .venv/bin/python benchmarks/regret.py                   # every study (2 h or more on 2 cores)
     .venv/bin/python benchmarks/regret.py --studies quickstart,rag
     .venv/bin/python benchmarks/regret.py --studies cache-bound --cells /tmp/cells.jsonl
``--cells`` keeps every measured configuration's objective in a file and reads it back on the
next run, so that a change to the tune is judged against its grid in the tune's time alone (on
the virtual clock a configuration measures the same each time; delete the file after changing
the simulator or the knee search).
Goal: regret at most 3% on every study within its default budget, and the
median tune device time at most a quarter of the grid's.

One knee search is one draw of the workload: on the quickstart the same configuration measured
with six workload seeds spans 41.3-57.0 req/s (sd 12%), so the best of 60 cells
each measured once is partly the best draw (the winner's curse), and a regret read from one
seed is mostly that draw. So the grid is measured at the study's own seed, then its
``--shortlist`` best cells, the start and the winner again at ``--seeds`` - 1 further workload
seeds (the same seeds for every configuration: paired draws); the optimum is the shortlisted
cell with the highest mean, and the regret is read from the means, with a 95% interval from
the per-seed ratios of winner to optimum. The one-seed figure is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import versions
from paired_draws import Draws
from study_grids import STUDIES, grid, study_of

from kneepoint.load.objective import rules
from kneepoint.load.size import PointSize
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.probes.backends import open_target
from kneepoint.probes.runtime import configure_logging
from kneepoint.records.engine import EngineConfig
from kneepoint.records.study import StudySpec

KNEEPOINT = str(Path(sys.executable).parent / "kneepoint")


@dataclass(frozen=True)
class Cell:
    """One configuration's knee search: its objective (0.0 where no rate met the SLO, a
    measurement) and device seconds, or the error that kept it from being measured (no
    objective: it is printed and left out of the optimum, never read as 0 req/s)."""

    objective: float
    device_s: float
    error: str | None = None


class UnscoredError(Exception):
    """A study whose tune, start or winner could not be measured: printed, not scored."""


@dataclass(frozen=True)
class Tuned:
    start: EngineConfig
    winner: EngineConfig
    trials: int
    device_h: float
    reason: str
    wall_s: float


@dataclass(frozen=True)
class Shortlist:
    """A study's tune and the grid's best cells by their first draw (``found``)."""

    study: StudySpec
    tuned: Tuned
    cells: list[EngineConfig]
    found: dict[str, Cell]


def measure(name: str, config: EngineConfig, seed_offset: int = 0) -> Cell:
    """The objective `kneepoint sweep` reads for ``config`` (its workload's seed moved on by
    ``seed_offset``) and the device time it held."""
    configure_logging(level="warning")
    study = study_of(name, seed_offset)
    try:
        size = PointSize.for_study(study, study.tuning.screen_seconds)
        with (
            tempfile.TemporaryDirectory() as folder,
            open_target(study, config, Path(folder), size) as target,
        ):
            result = study_knee_search(target.probe, study, config)
            spent = target.clock.seconds()
    except Exception as error:  # printed by the row that reads it
        return Cell(0.0, 0.0, error=f"{type(error).__name__}: {error}")
    return Cell(rules(study.objective).value(result) or 0.0, spent)


def tune(name: str) -> Tuned:
    """The real `kneepoint tune` of the study, read back from its ledger."""
    path, sets, _ = STUDIES[name]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as runs:
        argv = [KNEEPOINT, "tune", str(path), "--runs-dir", runs]
        for text in sets:
            argv += ["--set", text]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        ledgers = list(Path(runs).glob("*/ledger.jsonl"))
        events = [json.loads(line) for line in ledgers[0].open()] if ledgers else []
    baseline = next((e for e in events if e["event"] == "baseline"), None)
    if baseline is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UnscoredError(f"`kneepoint tune` exited {done.returncode} with no baseline: {tail}")
    promoted = [e for e in events if e["event"] == "promoted"]
    finished = next((e for e in events if e["event"] == "finished"), {"reason": "none"})
    return Tuned(
        start=EngineConfig.model_validate(baseline["config"]),
        winner=EngineConfig.model_validate((promoted[-1] if promoted else baseline)["config"]),
        trials=sum(e["event"] == "screened" for e in events),
        device_h=sum(e.get("device_s", 0.0) for e in events) / 3600.0,
        reason=finished["reason"],
        wall_s=time.perf_counter() - started,
    )


def measured(
    name: str, todo: list[EngineConfig], workers: int, cells: Path | None, seed_offset: int = 0
) -> dict[str, Cell]:
    """Each configuration's cell at one seed offset, by fingerprint: read from ``cells`` where
    it holds it, the rest measured in ``workers`` processes (and appended there as each
    finishes)."""
    found: dict[str, Cell] = {}
    if cells is not None and cells.exists():
        for line in cells.read_text().splitlines():
            row = json.loads(line)
            if row["study"] == name and row.get("seed_offset", 0) == seed_offset:
                found[row["config"]] = Cell(row["objective"], row["device_s"], row.get("error"))
    left = [c for c in todo if c.fingerprint() not in found]
    with ProcessPoolExecutor(workers) as pool:
        futures = {pool.submit(measure, name, c, seed_offset): c.fingerprint() for c in left}
        for future in as_completed(futures):
            key, cell = futures[future], future.result()
            found[key] = cell
            if cell.error is not None:
                print(f"    {name}: {key} not measured: {cell.error}", flush=True)
            elif cells is not None:  # an error is measured again on the next run
                row = {"study": name, "seed_offset": seed_offset, "config": key, **cell.__dict__}
                with cells.open("a") as out:
                    out.write(json.dumps(row) + "\n")
    return found


def seeded(
    name: str, configs: list[EngineConfig], first: dict[str, Cell], args: argparse.Namespace
) -> Draws:
    """``configs`` at every seed offset (offset 0 from ``first``), paired by seed."""
    by_config = {c.fingerprint(): [first[c.fingerprint()].objective] for c in configs}
    for offset in range(1, args.seeds):
        found = measured(name, configs, args.workers, args.cells, offset)
        if failed := [key for key in by_config if found[key].error is not None]:
            raise UnscoredError(f"{len(failed)} of the shortlist not measured at seed {offset}")
        for key, values in by_config.items():
            values.append(found[key].objective)
    return Draws(by_config)


def study_row(name: str, args: argparse.Namespace) -> dict[str, float]:
    study = study_of(name)
    tuned = tune(name)
    cells = grid(name)
    todo = list({c.fingerprint(): c for c in [tuned.start, tuned.winner, *cells]}.values())
    started = time.perf_counter()
    found = measured(name, todo, args.workers, args.cells)
    for role, config in (("start", tuned.start), ("winner", tuned.winner)):
        if (error := found[config.fingerprint()].error) is not None:
            raise UnscoredError(f"its {role} was not measured: {error}")
    errors = [c for c in cells if found[c.fingerprint()].error is not None]
    cells = [c for c in cells if c not in errors]
    if not cells:
        raise UnscoredError("no cell of its grid was measured")
    ranked = sorted(cells, key=lambda c: -found[c.fingerprint()].objective)
    best = ranked[0]
    optimum = found[best.fingerprint()].objective
    start, winner = found[tuned.start.fingerprint()], found[tuned.winner.fingerprint()]
    grid_h = sum(found[c.fingerprint()].device_s for c in cells) / 3600.0
    one_seed = 1.0 - winner.objective / optimum if optimum else 0.0
    budget = study.budget.max_device_hours
    print(
        f"{name}: one seed: start {start.objective:.2f}, winner {winner.objective:.2f} "
        f"({tuned.trials} trials, {tuned.device_h:.2f} device-h"
        f"{f' of {budget:g}' if budget else ''}, stop {tuned.reason}, "
        f"{tuned.wall_s:.0f} s), optimum {optimum:.2f} "
        f"({best.changes_from(study.engine) or 'the start'}), regret {one_seed:.1%}; "
        f"grid {len(cells)} configs{f' ({len(errors)} more not measured)' if errors else ''}, "
        f"{grid_h:.2f} device-h "
        f"({time.perf_counter() - started:.0f} s), tune/grid {tuned.device_h / grid_h:.1%}",
        flush=True,
    )
    print(f"    winner: {tuned.winner.changes_from(study.engine) or 'the start'}", flush=True)
    regret = one_seed
    if args.seeds > 1 and optimum:
        regret = seeded_row(name, Shortlist(study, tuned, ranked[: args.shortlist], found), args)
    return {"regret": regret, "share": tuned.device_h / grid_h}


def seeded_row(name: str, short: Shortlist, args: argparse.Namespace) -> float:
    """The regret read from ``args.seeds`` paired workload draws of the shortlist, start and
    winner; printed, and returned."""
    study, tuned = short.study, short.tuned
    configs = [tuned.start, tuned.winner, *short.cells]
    configs = list({c.fingerprint(): c for c in configs}.values())
    draws = seeded(name, configs, short.found, args)
    best = max(short.cells, key=lambda c: draws.mean(c.fingerprint()))
    win, opt = tuned.winner.fingerprint(), best.fingerprint()
    regret = 1.0 - draws.mean(win) / draws.mean(opt) if draws.mean(opt) else 0.0
    low, high = draws.ratio_interval(win, opt)
    print(
        f"    {args.seeds} seeds: start {draws.mean(tuned.start.fingerprint()):.2f}, winner "
        f"{draws.mean(win):.2f} ({draws.values(win)}), optimum {draws.mean(opt):.2f} of the "
        f"best {len(short.cells)} ({best.changes_from(study.engine) or 'the start'}: "
        f"{draws.values(opt)}), regret {regret:.1%} "
        f"(winner / optimum per seed {low:.2f}..{high:.2f})",
        flush=True,
    )
    return regret


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", help=f"comma-separated, of {', '.join(STUDIES)}")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="processes measuring the grid (default: one per core)",
    )
    parser.add_argument("--cells", type=Path,
                        help="a file of measured configurations, read and extended")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=5,
                        help="workload draws of the shortlist, start and winner")  # fmt: skip
    parser.add_argument("--shortlist", type=int, default=10,
                        help="the grid's best cells by the first draw, measured again")  # fmt: skip
    args = parser.parse_args()
    print(versions.line(), flush=True)
    names = args.studies.split(",") if args.studies else list(STUDIES)
    rows, unscored = [], []
    for name in names:
        try:
            rows.append(study_row(name, args))
        except UnscoredError as error:
            print(f"{name}: not scored: {error}", flush=True)
            unscored.append(name)
    if unscored:
        print(f"\nnot scored: {', '.join(unscored)} (errors above; left out of the figures)")
    if not rows:
        sys.exit(1)
    regrets = [r["regret"] for r in rows]
    print(
        f"\nworst regret {max(regrets):.1%}, median {statistics.median(regrets):.1%}; median "
        f"tune device time {statistics.median(r['share'] for r in rows):.1%} of the grid's "
        f"(goals: regret <= 3% each, device time <= 25%; regret over {args.seeds} seeds)"
    )


if __name__ == "__main__":
    main()
