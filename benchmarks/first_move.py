"""The first move's price against what a real engine measured (issue "Step 16", part 1).

For every real recording, kneepoint's diagnosis and pruning read its sweep as a tune's
baseline would, and each move they price is set beside a measurement of that same move:

- two recordings of one study whose configurations differ by exactly one priced knob, moved
  the priced way (tests/fixtures/real: the H100 kv-starved -> base pair is a bigger memory
  fraction on a starved pool): the ratio of their SLO capacities;
- a tune's run folder (its baseline's knee search and its ledger): every single-knob trial
  it measured against its baseline, its measured over its incumbent's objective.

Each row prints the price as the current code makes it, the measured ratio and how far apart
they are (the larger over the smaller); the goal is within 1.25x on every row.

Run: .venv/bin/python benchmarks/first_move.py [PATH ...]   (default: tests/fixtures/real;
a PATH is a recording, a folder of them, or a tune's run folder; seconds)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import versions  # noqa: E402

from kneepoint.calibration.recorded import (  # noqa: E402
    RUN_MARK,
    RecordedSweep,
    find_recorded,
    is_run_folder,
)
from kneepoint.config import knob_catalogue  # noqa: E402
from kneepoint.load.objective import rules  # noqa: E402
from kneepoint.policies.diagnosis.bottleneck import diagnose  # noqa: E402
from kneepoint.policies.diagnosis.context import context_of  # noqa: E402
from kneepoint.policies.diagnosis.observe import knee_points, observe_study  # noqa: E402
from kneepoint.policies.pruning.prune import prune  # noqa: E402
from kneepoint.policies.search.pruned_space import in_objective_terms  # noqa: E402
from kneepoint.policies.search.worth import PRIOR_SPREAD_LOG  # noqa: E402
from kneepoint.probes.runtime import configure_logging  # noqa: E402
from kneepoint.records.backend_spec import VllmBackend  # noqa: E402
from kneepoint.records.proposal import KnobCandidate, Pruning  # noqa: E402
from kneepoint.run.folder import RunFolder  # noqa: E402
from kneepoint.run.state import RunState  # noqa: E402
from kneepoint.tune.proposers import short_of_rate  # noqa: E402

GOAL = 1.25


def pruning_of(recording: RecordedSweep) -> Pruning | None:
    """The candidates a tune would read off this sweep as its baseline (None without a knee)."""
    if knee_points(recording.result)[0] is None:
        return None
    observation = observe_study(recording.study, recording.result.config, recording.result)
    context = context_of(observation)
    return prune(diagnose(context), context, knob_catalogue(), backend=VllmBackend())


def priced(
    candidates: Sequence[KnobCandidate], knob: str, before: object, after: object
) -> float | None:
    """The price of moving ``knob`` the way ``before -> after`` goes (None: not priced so)."""
    for candidate in candidates:
        if candidate.knob.name != knob:
            continue
        if not isinstance(before, int | float) or not isinstance(after, int | float):
            # an engine default (None) has no side to be on: only a "to" move is priced
            return candidate.predicted_ratio if candidate.direction == "to" else None
        up = after > before
        if candidate.direction in ("to", "up" if up else "down"):
            return candidate.predicted_ratio
    return None


def pairs(recordings: list[RecordedSweep]) -> list[tuple[str, float, float]]:
    rows = []
    for base in recordings:
        pruning = pruning_of(base)
        if pruning is None:
            continue
        for other in recordings:
            if other is base or other.study_folder != base.study_folder:
                continue
            changes = other.result.config.changes_from(base.result.config)
            if len(changes) != 1:
                continue
            ((knob, (before, after)),) = changes.items()
            price = priced(pruning.candidates, knob, before, after)
            if price is None or not base.result.capacity_rps:
                continue
            measured = (other.result.capacity_rps or 0.0) / base.result.capacity_rps
            label = (
                f"{base.study_folder.name}/{base.name} -> {other.name}: {knob} {before} -> {after}"
            )
            rows.append((label, price, measured))
    return rows


def tune_moves(folder: Path) -> list[tuple[str, float, float]]:
    """Every single-knob trial a tune measured against its baseline, re-priced now."""
    (baseline,) = find_recorded([folder])
    pruning = pruning_of(baseline)
    objective = baseline.study.objective
    events = RunFolder(folder).ledger.read()
    state = RunState.replay(events, objective)
    if pruning is None or state.baseline is None:
        return []
    # The tune's own terms for the objective, as its first proposer priced them: goodput never
    # passes its rate, and a start short of the rate gains the whole rate where a move clears
    # it (the prediction's spread: the recorded prior, before the run measured any move)
    start = RunState.replay(
        [e for e in events if e.event in ("run_started", "baseline")], objective
    )
    rule = rules(objective)
    most = rule.most_gain(rule.value(state.baseline.repeats))
    short_of = short_of_rate(rule.fixed_rate_rps, start.incumbent_knee_rps, PRIOR_SPREAD_LOG)
    candidates = in_objective_terms(pruning.candidates, most, short_of)
    rows = []
    for proposal, measured in state.measured_moves():
        changes = proposal.config.changes_from(baseline.result.config)
        if len(changes) != 1:
            continue  # a move from a later incumbent, priced off another sweep
        ((knob, (before, after)),) = changes.items()
        price = priced(candidates, knob, before, after)
        if price is not None:
            rows.append((f"{folder.name}: {knob} {before} -> {after}", price, measured))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[REPO / "tests/fixtures/real"])
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging("warning")
    rows = []
    for path in args.paths:
        runs = [path] if is_run_folder(path) else sorted(p.parent for p in path.rglob(RUN_MARK))
        rows += pairs(find_recorded([path])) if not is_run_folder(path) else []
        rows += [row for run in runs if is_run_folder(run) for row in tune_moves(run)]
    print(f"{'move':<78} {'priced':>7} {'measured':>9} {'apart':>6}")
    within = 0
    for label, price, measured in rows:
        apart = (
            max(price, measured) / min(price, measured)
            if min(price, measured) > 0
            else float("inf")
        )
        within += apart <= GOAL
        print(f"{label:<78.78} {price:>6.2f}x {measured:>8.2f}x {apart:>5.2f}x")
    print(f"within {GOAL}x: {within} of {len(rows)}")


if __name__ == "__main__":
    main()
