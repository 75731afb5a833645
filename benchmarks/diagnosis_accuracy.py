"""How often the diagnosis names the constraint the simulator's ground truth says binds.

For each generated scenario (benchmarks/scenario_grid.py) the full probe path runs on the
virtual clock: a knee search with kneepoint's sweep (geometric ramp, bisection, SLO capacity
interpolated), then the saturated point past the knee and the point below it, exactly as the
agent picks them. A scenario counts when its ground truth at the saturated point is dominated
(>= 70% of wall time) by one constraint. The diagnosis reads only what a real deployment
exposes, in three signal tiers: everything the GPU offers (GPM on Hopper), NVML only, and no
GPU telemetry at all (vLLM metrics plus the roofline estimate).

Caveat, printed with the figures: the roofline estimate prices steps with the same physics the
simulator runs, so the tiers that lean on it (NVML only, no GPU) read a simulator whose
efficiencies they know exactly; on real GPUs their accuracy is an upper bound. The queue walls
(cache, admission caps) and the GPM tier do not depend on it.

A last tier reads recorded real runs (tests/fixtures/real, a copy of shared/real-h100, or the
paths given): each recording diagnosed per signal tier and scored against what the real
engine's own knob effects showed binds (``expected.yaml`` beside the recordings).

Small models on wide tensor-parallel servers (``--wide``) are diagnosed as the others are, and
the first move pruning proposes for each is printed beside: a narrower server, the rest of the
node as replicas, is the right one there. Likewise small models streaming long answers behind
one saturated API server (``--frontend``; its work per chunk the real recordings'): the truth
charges a step whose output waits more than a step behind the server's backlog to scheduling,
and the right first move is another API server.

Run: .venv/bin/python benchmarks/diagnosis_accuracy.py [--scenarios 60] [--seed 0] [PATH ...]
Goal: >= 95% on the full-signal tier, over >= 40 dominated scenarios; every scored real run.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from itertools import chain
from pathlib import Path
from typing import Any

import versions
import yaml
from scenario_grid import (
    DRAFTING_ARCHETYPES,
    FRONTEND_ARCHETYPES,
    LIBRARY_ARCHETYPES,
    SESSION_ARCHETYPES,
    WIDE_ARCHETYPES,
    Scenario,
    scenarios,
)

from kneepoint.calibration.recorded import RecordedSweep, find_recorded
from kneepoint.config import knob_catalogue
from kneepoint.load.plan import point_seed
from kneepoint.load.size import PointSize
from kneepoint.measure.sweep import knee_search
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import knee_points, observe
from kneepoint.policies.pruning.prune import prune
from kneepoint.probes.runtime import configure_logging
from kneepoint.records.diagnosis import Diagnosis, Observation
from kneepoint.records.knobs import CONSTRAINTS
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.sim.attribution import Attribution
from kneepoint.sim.loadpoint import simulate_load_point

DOMINANCE = 0.7
REAL = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real"
TIERS: dict[str, tuple[str, ...]] = {
    "full": (),
    "nvml only": ("sm_util_pct", "tensor_util_pct", "dram_bw_util_pct"),
    "no GPU": ("sm_util_pct", "tensor_util_pct", "dram_bw_util_pct", "gpu_util_pct",
               "memory_util_pct", "power_w"),
}  # fmt: skip


SESSION_REQUESTS = 6000
"""A conversational point's most requests (its ramp and its window, at a fast rate)."""


def _requests(rate: float) -> int:
    return int(min(600, max(200, rate * 20)))


def measure(scenario: Scenario) -> tuple[Observation, Attribution] | None:
    """Knee search through the probes' sweep; what the diagnosis reads from it (as the agent
    builds it) and the ground truth at the saturated point (None when the sweep found no
    knee)."""
    study, truths = scenario.study, {}

    # A conversation's point runs past its sessions' ramp, which its window skips; a wide
    # server's knee lies at hundreds of req/s, where 600 requests last under two seconds and
    # never fill it (10 000 req/s "passed"): both get points of 20 s.
    long = study.workload.conversational or scenario.archetype == "wide"
    size = PointSize.for_study(study, 20.0) if long else None

    def probe(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
        seed = point_seed(study.seed, repeat, attempt)
        count = _requests(rate) if size is None else min(SESSION_REQUESTS, size.requests(rate))
        warmup = 0.0 if size is None else size.warmup_s
        simulated = simulate_load_point(study, rate, count, seed=seed, warmup_s=warmup)
        truths[id(simulated.point)] = simulated.truth
        return simulated.point

    result = knee_search(probe, study.engine, study.slo, scenario.start_rps, rel_tol=0.05)
    if knee_points(result)[0] is None:
        return None
    observation = observe(result, gpu=study.gpu, model=study.model, engine=study.engine,
                          workload=study.workload)  # fmt: skip
    return observation, truths[id(observation.saturated)]


def tiered(observation: Observation, fields: tuple[str, ...]) -> Observation:
    """The observation as a deployment without ``fields`` would read it."""
    below = observation.below
    return observation.model_copy(update={"saturated": strip(observation.saturated, fields),
                                          "below": below and strip(below, fields)})  # fmt: skip


def strip(point: LoadPoint, fields: tuple[str, ...]) -> LoadPoint:
    signals = point.signals.model_copy(update=dict.fromkeys(fields))
    return point.model_copy(update={"signals": signals})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", type=int, default=60, help="scenarios to generate")
    parser.add_argument("--sessions", type=int, default=24, help="conversational scenarios")
    parser.add_argument("--drafting", type=int, default=12, help="speculating servers")
    parser.add_argument("--libraries", type=int, default=16, help="long documents, a small pool")
    parser.add_argument("--wide", type=int, default=16, help="small models on wide TP servers")
    parser.add_argument("--frontend", type=int, default=8, help="behind a saturated API server")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "real",
        nargs="*",
        type=Path,
        default=[REAL],
        help="recorded real runs for the last tier (default: tests/fixtures/real)",
    )
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped = Counter[str]()
    levers: list[bool | None] = []
    scaled: list[bool | None] = []
    tiers = " ".join(f"{t:<22}" for t in TIERS)
    print(f"{'scenario':<12} {'model / gpu':<30} {'truth':<17} {tiers}")
    drawn = chain(
        scenarios(args.scenarios, args.seed),
        scenarios(args.sessions, args.seed, SESSION_ARCHETYPES),
        scenarios(args.drafting, args.seed, DRAFTING_ARCHETYPES),
        scenarios(args.libraries, args.seed, LIBRARY_ARCHETYPES),
        scenarios(args.wide, args.seed, WIDE_ARCHETYPES),
        scenarios(args.frontend, args.seed, FRONTEND_ARCHETYPES),
    )
    for scenario in drawn:
        measured = measure(scenario)
        if measured is None:
            skipped["no knee found"] += 1
            continue
        observation, truth = measured
        # the first move counts on every wide server, dominated or not: its lever is the same
        first = diagnose(context_of(observation))
        levers.append(narrows(scenario, observation, first))
        scaled.append(scales_out(scenario, observation, first))
        label, share = truth.dominant()
        if share < DOMINANCE:
            skipped[f"truth not dominated (<{DOMINANCE:.0%})"] += 1
            continue
        study = scenario.study
        found = {}
        for tier, fields in TIERS.items():
            found[tier] = diagnose(context_of(tiered(observation, fields)))
        rows.append({"label": label, "found": {t: d.binding for t, d in found.items()}})
        cells = " ".join(
            f"{d.binding + ('' if d.binding == label else ' X'):<14} {d.confidence:>5.0%}  "
            for d in found.values()
        )
        print(f"{scenario.name:<12} {study.model.name + ' / ' + study.gpu.name:<30} "
              f"{label:<10} {share:>5.0%} {cells}", flush=True)  # fmt: skip
    report(rows, skipped, time.perf_counter() - started)
    wide = [lever for lever in levers if lever is not None]
    print(f"wide servers whose first proposed move is a narrower TP: {sum(wide)}/{len(wide)}")
    fronts = [lever for lever in scaled if lever is not None]
    print(f"front-end-bound servers whose first proposed move is another API server: "
          f"{sum(fronts)}/{len(fronts)}")  # fmt: skip
    real_tier(args.real)


def narrows(scenario: Scenario, observation: Observation, found: Diagnosis) -> bool | None:
    """For a wide server (the ``wide`` archetype): whether the first knob pruning proposes is
    a narrower tensor-parallel size (None for the other archetypes)."""
    if scenario.archetype != "wide":
        return None
    study = scenario.study
    pruning = prune(found, context_of(observation), knob_catalogue(), gpus=study.gpus)
    first = pruning.candidates[0] if pruning.candidates else None
    now = study.engine.tensor_parallel_size or 1
    return (
        first is not None
        and first.knob.name == "tensor_parallel_size"
        and (isinstance(first.target, int) and first.target < now)
    )


def scales_out(scenario: Scenario, observation: Observation, found: Diagnosis) -> bool | None:
    """For a server behind a saturated API server (the ``frontend`` archetype, truth
    dominated by it or not): whether the first knob pruning proposes is more API servers."""
    if scenario.archetype != "frontend":
        return None
    pruning = prune(found, context_of(observation), knob_catalogue(), gpus=1)
    first = pruning.candidates[0] if pruning.candidates else None
    return first is not None and first.knob.name == "api_server_count"


def expected_binding(recorded: RecordedSweep) -> tuple[str | None, str]:
    """The binding the real engine's own knob effects showed (expected.yaml in the study
    folder), and why; None where none is recorded."""
    expected = recorded.study_folder / "expected.yaml"
    if not expected.is_file():
        return None, ""
    found = (yaml.safe_load(expected.read_text()) or {}).get(recorded.name) or {}
    return found.get("binding"), found.get("because", "")


def real_tier(paths: list[Path]) -> None:
    """The diagnosis of every recorded real run, per signal tier, against what its measured
    knob effects say binds."""
    print("\nrecorded real runs (each read at its last passing and first failing rate)")
    right, scored = Counter[str](), 0
    print(f"{'recording':<43} {'expected':<16} " + " ".join(f"{t:<22}" for t in TIERS))
    for recorded in find_recorded(paths):
        study = recorded.study
        observation = observe(recorded.result, gpu=study.gpu, model=study.model,
                              engine=recorded.result.config, workload=study.workload)  # fmt: skip
        expected, _ = expected_binding(recorded)
        scored += expected is not None
        cells = []
        for tier, fields in TIERS.items():
            found = diagnose(context_of(tiered(observation, fields)))
            right[tier] += found.binding == expected
            mark = "" if expected is None or found.binding == expected else " X"
            cells.append(f"{found.binding + mark:<14} {found.confidence:>5.0%}  ")
        where = f"{recorded.study_folder.name}/{recorded.name}"
        print(f"{where:<43} {expected or 'unscored':<16} {' '.join(cells)}")
    for tier in TIERS:
        print(f"accuracy, recorded real runs, {tier:<10}: {right[tier]}/{scored}"
              + (f" = {right[tier] / scored:.0%}" if scored else ""))  # fmt: skip


def report(rows: list[dict[str, Any]], skipped: Counter[str], wall_s: float) -> None:
    print(f"\n{len(rows)} dominated scenarios ({dict(skipped) or 'none skipped'}); "
          f"by truth: {dict(Counter(r['label'] for r in rows))}; {wall_s:.0f} s wall")  # fmt: skip
    print("(the NVML-only and no-GPU tiers price steps with the simulator's own roofline: on real "
          "GPUs their figures are an upper bound)")  # fmt: skip
    for tier in TIERS:
        right = sum(r["found"][tier] == r["label"] for r in rows)
        print(f"accuracy, {tier:<10}: {right}/{len(rows)} = {right / max(1, len(rows)):.1%}"
              + ("   (goal >= 95%)" if tier == "full" else ""))  # fmt: skip
    verdicts = [*CONSTRAINTS, "inconclusive", "underloaded", "client_bound"]
    for tier in TIERS:
        print(f"\nconfusion matrix, {tier} (rows: truth, columns: diagnosis)")
        print(" " * 12 + "".join(f"{v[:11]:>12}" for v in verdicts))
        for label in CONSTRAINTS:
            counts = Counter(r["found"][tier] for r in rows if r["label"] == label)
            print(f"{label:<12}" + "".join(f"{counts.get(v, 0):>12}" for v in verdicts))


if __name__ == "__main__":
    main()
