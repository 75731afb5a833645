"""How much device time each search strategy spends to get within 3% of the best configuration.

On each shipped simulator scenario, every configuration of an exhaustive grid over the study's
knobs is measured (an SLO-capacity knee search on the virtual clock; its device time is the
simulated time the sweep held the server plus the modelled start-up). The grid's best capacity
is the reference optimum. Each strategy then spends device time measuring the configurations
it picks, in the order it picks them, until one is within 3% of that optimum:

- grid: the exhaustive grid (it must measure everything to know it has the best);
- random: the grid in random order (mean over seeds);
- optuna (unpruned): Optuna TPE over every grid knob, no diagnosis (mean over seeds);
- kneepoint: diagnosis of the incumbent, pruning, coordinate descent then Optuna over the
  pruned knobs, re-diagnosing after every gain (the loop of `kneepoint tune`, without its
  validation repeats: every strategy pays one measurement per configuration here).

Every configuration is measured once and cached, so all strategies see the same numbers; the
grid is measured by --workers processes at once (each measurement is independent and
deterministic, so the figures do not depend on how many).

Run: .venv/bin/python benchmarks/search_efficiency.py            # quick: ~7 minutes, 3 seeds
     .venv/bin/python benchmarks/search_efficiency.py --full     # all four scenarios, 5 seeds
The quick run leaves out cache-bound, whose 32 knee searches of long agent sessions take about
20 minutes alone on 2 cores (a smaller grid there changes which configurations a pruned search
can reach, so it would not measure the same thing); --full takes about 40 minutes.
Goal: kneepoint <= 15% of the grid's device time, and >= 2x faster than unpruned Optuna.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kneepoint.config import knob_catalogue, load_study
from kneepoint.load.size import PointSize
from kneepoint.measure.progress import duration
from kneepoint.measure.sweep import knee_search
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import knee_points, observe
from kneepoint.policies.pruning.prune import prune
from kneepoint.policies.search.coordinate import CoordinateDescent
from kneepoint.policies.search.optuna_search import OptunaProposer
from kneepoint.policies.search.phased import Phased
from kneepoint.policies.search.proposer import Proposer, replay
from kneepoint.policies.search.pruned_space import search_space
from kneepoint.probes.backends import open_target
from kneepoint.probes.runtime import configure_logging
from kneepoint.records.backend_spec import SimBackend
from kneepoint.records.engine import EngineConfig
from kneepoint.records.knobs import ChoiceDomain, Knob
from kneepoint.records.proposal import KnobCandidate, Outcome, Proposal, SearchSpace
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepResult

SCENARIOS = Path(__file__).resolve().parent.parent / "configs" / "scenarios"
WITHIN = 0.97
GIB = 2**30
# The grid per scenario: the study's knobs, each over values around the starting config's.
GRIDS: dict[str, dict[str, list[object]]] = {
    "compute-bound": {
        "quantization": [None, "fp8"], "max_num_batched_tokens": [2048, 8192, 16384],
        "max_num_seqs": [64, 256, 1024], "async_scheduling": [False, True],
    },
    "bandwidth-bound": {
        "quantization": [None, "fp8"], "kv_cache_dtype": ["auto", "fp8"],
        "max_num_seqs": [32, 64, 256], "max_num_batched_tokens": [2048, 8192],
    },
    "scheduling-bound": {
        "max_num_seqs": [16, 32, 64, 128, 256, 512], "async_scheduling": [False, True],
        "max_num_batched_tokens": [2048, 8192], "kv_cache_dtype": ["auto", "fp8"],
    },
    "cache-bound": {
        "kv_cache_memory_bytes": [GIB, 2 * GIB, 4 * GIB, 8 * GIB],
        "kv_cache_dtype": ["auto", "fp8"], "max_num_seqs": [64, 256],
        "quantization": [None, "fp8"],
    },
}  # fmt: skip
START_RPS = {"compute-bound": 4.0, "bandwidth-bound": 0.5, "scheduling-bound": 40.0,
             "cache-bound": 4.0}  # fmt: skip


@dataclass(frozen=True)
class Measurement:
    capacity_rps: float
    device_s: float
    result: SweepResult


class Bench:
    """Every configuration of one scenario measured once, on demand."""

    def __init__(self, name: str) -> None:
        self.name, self.study = name, load_study(SCENARIOS / f"{name}.yaml")
        self.knobs = GRIDS[name]
        self.cache: dict[str, Measurement] = {}
        self.folder = Path(tempfile.mkdtemp(prefix=f"kp-search-{name}-"))

    def measure_all(self, configs: list[EngineConfig], workers: int) -> None:
        """Measure ``configs`` not yet cached, ``workers`` processes at once."""
        todo = [c for c in configs if c.fingerprint() not in self.cache]
        if workers <= 1:
            for config in todo:
                self.measure(config)
            return
        with ProcessPoolExecutor(workers) as pool:
            found = pool.map(_measure_in_worker, [self.name] * len(todo), todo)
            for config, measurement in zip(todo, found, strict=True):
                self.cache[config.fingerprint()] = measurement

    def measure(self, config: EngineConfig) -> Measurement:
        key = config.fingerprint()
        if key not in self.cache:
            self.cache[key] = self._knee(config)
        return self.cache[key]

    def _knee(self, config: EngineConfig) -> Measurement:
        try:
            size = PointSize.for_study(self.study, 12)
            with open_target(self.study, config, self.folder, size) as target:
                result = knee_search(target.probe, config, self.study.slo, START_RPS[self.name])
                spent = target.clock.seconds()
        except Exception as exc:  # a config that does not start still costs its attempt
            print(f"    {config.changes_from(self.study.engine)}: does not start ({exc})")
            return Measurement(0.0, 60.0, SweepResult(kind="knee", config=config, points=(),
                                                      capacity_rps=None))  # fmt: skip
        return Measurement(result.capacity_rps or 0.0, spent, result)

    def grid(self) -> list[EngineConfig]:
        knobs = self.knobs
        return [self.study.engine.replace(**dict(zip(knobs, values, strict=True)))
                for values in itertools.product(*knobs.values())]  # fmt: skip


def _measure_in_worker(name: str, config: EngineConfig) -> Measurement:
    configure_logging(level="warning")
    return Bench(name).measure(config)


def cost_to_reach(bench: Bench, picks: Iterator[EngineConfig], target: float) -> tuple[float, bool]:
    """Device seconds spent on ``picks`` until one reaches ``target``, and whether one did
    (if none did, everything the strategy spent before it stopped)."""
    spent, seen = 0.0, set()
    for config in picks:
        if config.fingerprint() in seen:
            continue
        seen.add(config.fingerprint())
        found = bench.measure(config)
        spent += found.device_s
        if found.capacity_rps >= target:
            return spent, True
    return spent, False


def _asked(proposer: Proposer, bench: Bench, limit: int) -> Iterator[EngineConfig]:
    for _ in range(limit):
        proposal = proposer.ask()
        if proposal is None:
            return
        yield proposal.config
        found = bench.measure(proposal.config)
        proposer.tell(proposal, Outcome(status="ok", objective=found.capacity_rps, feasible=True))


def unpruned_space(bench: Bench, objective: float) -> SearchSpace:
    candidates = tuple(
        KnobCandidate(
            knob=Knob(name=name, flag="--" + name.replace("_", "-"),
                      domain=ChoiceDomain(choices=tuple(values)),  # type: ignore[arg-type]
                      acts_on=("compute",), description="grid knob"),
            direction="to", target=values[-1], relieves="compute", predicted_ratio=1.0,  # type: ignore[arg-type]
            reason="unpruned grid knob",
        )
        for name, values in bench.knobs.items()
    )  # fmt: skip
    engine = bench.study.engine
    current = {name: getattr(engine, name) for name in bench.knobs}
    current = {k: (v if v is not None else bench.knobs[k][0]) for k, v in current.items()}
    return SearchSpace(
        incumbent=engine,
        incumbent_objective=objective,
        current_values=current,
        candidates=candidates,
    )  # type: ignore[arg-type]


def kneepoint_picks(bench: Bench, seed: int, limit: int = 60) -> Iterator[EngineConfig]:
    """The tune loop's choices: diagnose, prune, ask; re-diagnose after every gain."""
    study: StudySpec = bench.study
    incumbent = study.engine
    yield incumbent
    history: list[tuple[Proposal, Outcome]] = []
    for _ in range(limit):
        found = bench.measure(incumbent)
        if knee_points(found.result)[0] is None:
            return
        observation = observe(found.result, gpu=study.gpu, model=study.model, engine=incumbent,
                              workload=study.workload)  # fmt: skip
        context = context_of(observation)
        pruning = prune(diagnose(context), context, knob_catalogue(),
                        allowed=tuple(bench.knobs), backend=SimBackend())  # fmt: skip
        space = search_space(pruning, context, found.capacity_rps)
        proposer = replay(Phased(CoordinateDescent(space, seed),
                                 lambda s=space: OptunaProposer(s, seed)), history)  # fmt: skip
        moved = False
        for _ in range(limit):
            proposal = proposer.ask()
            if proposal is None:
                return
            yield proposal.config
            result = bench.measure(proposal.config)
            outcome = Outcome(status="ok", objective=result.capacity_rps, feasible=True)
            history.append((proposal, outcome))
            proposer.tell(proposal, outcome)
            if result.capacity_rps > found.capacity_rps * 1.03:
                incumbent, moved = proposal.config, True
                break
        if not moved:
            return


def mean_cost(runs: list[tuple[float, bool]]) -> tuple[float, str]:
    """Mean device seconds over seeds; a seed that never got there counts what it spent
    before it stopped, so the mean is then a lower bound (marked)."""
    missed = sum(not reached for _, reached in runs)
    note = f"  (>=: {missed}/{len(runs)} seeds stopped short of it)" if missed else ""
    return statistics.fmean(cost for cost, _ in runs), note


def scenario_figures(name: str, seeds: int, workers: int) -> dict[str, float]:
    bench = Bench(name)
    grid = bench.grid()
    started = time.perf_counter()
    bench.measure_all(grid, workers)
    results = {c.fingerprint(): bench.measure(c) for c in grid}
    best_config = max(grid, key=lambda c: results[c.fingerprint()].capacity_rps)
    optimum = results[best_config.fingerprint()].capacity_rps
    target = WITHIN * optimum
    grid_cost = sum(m.device_s for m in results.values())
    wall = time.perf_counter() - started
    where = best_config.changes_from(bench.study.engine)
    print(f"\n{name}: {len(grid)} grid configs measured in {wall:.0f} s wall; optimum "
          f"{optimum:.2f} req/s at {where}")  # fmt: skip
    start = bench.study.engine
    # Every strategy first measures the starting configuration: no search can claim a gain
    # without it (and Optuna is warm-started with it, as kneepoint's search is).
    strategies: dict[str, Callable[[int], Iterator[EngineConfig]]] = {
        "random": lambda seed: itertools.chain(
            [start], random.Random(seed).sample(grid, len(grid))),
        "optuna (unpruned)": lambda seed: itertools.chain([start], _asked(OptunaProposer(
            unpruned_space(bench, bench.measure(start).capacity_rps), seed,
            n_startup_trials=4), bench, 10 * len(grid))),
        "kneepoint": lambda seed: kneepoint_picks(bench, seed),
    }  # fmt: skip
    figures: dict[str, float] = {"grid": grid_cost}
    print(f"  {'grid':<18} {grid_cost / 3600:8.2f} device-h   100.0% of the grid")
    for label, picks in strategies.items():
        started = time.perf_counter()
        runs = [cost_to_reach(bench, picks(seed), target) for seed in range(seeds)]
        cost, note = mean_cost(runs)
        figures[label] = cost
        wall = duration(time.perf_counter() - started)
        print(f"  {label:<18} {cost / 3600:8.2f} device-h   {cost / grid_cost:6.1%} of the "
              f"grid{note}   ({wall} wall)")  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="cache-bound too, and 5 seeds (about 40 minutes)")  # fmt: skip
    parser.add_argument("--seeds", type=int, help="seeds per strategy (default 3, --full 5)")
    parser.add_argument("--scenarios", help=f"comma-separated, of {', '.join(GRIDS)}")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes measuring the grid (default: one per core)")  # fmt: skip
    args = parser.parse_args()
    seeds = args.seeds or (5 if args.full else 3)
    names = args.scenarios.split(",") if args.scenarios else [*GRIDS][: None if args.full else 3]
    configure_logging(level="warning")
    started = time.perf_counter()
    print(f"{'full' if args.full else 'quick'} run: {', '.join(names)}; {seeds} seeds, "
          f"{args.workers} workers (--full adds cache-bound: its 32 knee searches of agent "
          "sessions take ~20 minutes alone)")  # fmt: skip
    totals: dict[str, list[float]] = {}
    for name in names:
        for label, cost in scenario_figures(name, seeds, args.workers).items():
            totals.setdefault(label, []).append(cost)
    grid = sum(totals["grid"])
    print("\nsummed over scenarios (device-hours; ratios measured in this run):")
    for label, costs in totals.items():
        print(f"  {label:<18} {sum(costs) / 3600:8.2f}   {sum(costs) / grid:6.1%} of the grid")
    kp, opt = sum(totals["kneepoint"]), sum(totals["optuna (unpruned)"])
    print(f"  unpruned Optuna / kneepoint: {opt / kp:.1f}x   (goals: kneepoint <= 15% of the "
          "grid, >= 2x faster than unpruned Optuna)")  # fmt: skip
    print(f"wall time: {duration(time.perf_counter() - started)}")


if __name__ == "__main__":
    main()
