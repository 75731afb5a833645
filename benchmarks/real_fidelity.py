"""The simulator beside real engines: every recorded real sweep replayed at the same
configuration, rates, repeats and load-point sizes on the virtual clock.

For each recording it prints the SLO capacity (real, simulated, error), then per rate the ITL
p50/p95, TTFT p50/p99, running sequences and KV use, real / simulated. For each pair of
recordings of one study whose configurations differ by knobs, the effect of that change as the
real engine measured it, as the simulator measures it, and as kneepoint's pruning predicted it
from the first recording's diagnosis. A summary gives the figures the fidelity goals name.

Run: .venv/bin/python benchmarks/real_fidelity.py [PATH ...] [--seeds 3]   (default: every GPU
recording in tests/fixtures/real; a PATH is a sweep.json, a folder with one, or a folder of such;
--seeds K also replays K - 1 other draws of each workload: the spread one sweep's arrivals give)
Goals: uncalibrated, capacity within 10% and the fp8 effect within 5 points on every config;
calibrated leave-one-out, capacity within 5%, ITL p50 within 15% at every rate that meets the
SLO, the fp8 effect within 3 points.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import versions

from kneepoint.calibration.from_sweeps import calibrate
from kneepoint.calibration.recorded import RecordedSweep, find_recorded
from kneepoint.calibration.replay import replay
from kneepoint.config import knob_catalogue
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import knee_points, observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.probes.runtime import configure_logging
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.sweep import SweepPoint, SweepResult

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = [REPO / "tests" / "fixtures" / "real"]


def _err(real: float | None, sim: float | None) -> str:
    if not real or sim is None:
        return "   n/a"
    return f"{(sim - real) / real:+6.1%}"


def _dist(point: SweepPoint, metric: str, pct: int) -> float:
    return max(d[metric].at(pct) for d in point.point.dists.values())


def rate_table(recorded: RecordedSweep, simulated: SweepResult) -> list[str]:
    rows = [f"  {'rate':>6} {'meets':>6}  {'ITL p50 ms':>15} {'ITL p95 ms':>15} "
            f"{'TTFT p50 ms':>17} {'TTFT p99 ms':>17} {'running':>13} {'KV use':>13}"]  # fmt: skip
    sim_at = {(p.repeat, p.rate_rps): p for p in simulated.points}
    for real in sorted(recorded.result.points, key=lambda p: (p.repeat, p.rate_rps)):
        sim = sim_at[(real.repeat, real.rate_rps)]
        cells = [f"{_dist(real, m, q):7.1f}/{_dist(sim, m, q):<7.1f}"
                 for m, q in (("itl", 50), ("itl", 95))]  # fmt: skip
        cells += [f"{_dist(real, 'ttft', q):8.0f}/{_dist(sim, 'ttft', q):<8.0f}" for q in (50, 99)]
        rs, ss = real.point.signals, sim.point.signals
        cells.append(f"{rs.running_mean or 0:6.1f}/{ss.running_mean or 0:<6.1f}")
        cells.append(f"{rs.kv_usage_mean or 0:6.3f}/{ss.kv_usage_mean or 0:<6.3f}")
        meets = ("y" if real.margin <= 1 else "n") + "/" + ("y" if sim.margin <= 1 else "n")
        rows.append(f"  {real.rate_rps:6.1f} {meets:>6}  " + " ".join(cells))
    return rows


def predicted_ratio(base: RecordedSweep, other: RecordedSweep) -> tuple[str, float | None]:
    """What kneepoint's pruning, reading ``base``'s sweep, predicted for the knob ``other``
    changed (the first changed knob it has a rule for)."""
    changes = other.result.config.changes_from(base.result.config)
    if knee_points(base.result)[0] is None:
        return ", ".join(changes), None
    study = base.study
    observation = observe_study(study, base.result.config, base.result)
    pruning = prune(
        diagnose(context_of(observation)),
        context_of(observation),
        knob_catalogue(),
        backend=VllmBackend(),
    )
    for candidate in pruning.candidates:
        if candidate.knob.name in changes:
            return ", ".join(changes), candidate.predicted_ratio
    return ", ".join(changes), None


def _label(recording: RecordedSweep) -> str:
    """The study folder and the configuration: two studies may each have a ``base``."""
    return f"{recording.study_folder.name}/{recording.name}"


def _nearest(recording: RecordedSweep, others: list[RecordedSweep]) -> RecordedSweep | None:
    """The recording of the same study whose configuration differs by the fewest knobs (a
    ``base`` first on ties): the change this one is an instance of."""
    study_dir = recording.study_folder
    same = [o for o in others if o is not recording and o.study_folder == study_dir]
    if not same:
        return None
    config = recording.result.config
    return min(same, key=lambda o: (len(config.changes_from(o.result.config)), o.name != "base"))


@dataclass
class Figures:
    """The figures the fidelity goals name, gathered while the tables print."""

    capacity: list[float] = field(default_factory=list)
    effect_points: list[float] = field(default_factory=list)
    loo_capacity: list[float] = field(default_factory=list)
    loo_itl_p50: list[float] = field(default_factory=list)
    loo_effect_points: list[float] = field(default_factory=list)

    def summary(self) -> list[str]:
        def worst(values: list[float], scale: float = 100.0) -> str:
            return f"{max(values, key=abs) * scale:+.1f}" if values else "n/a"

        def verdict(values: list[float], limit: float) -> str:
            return "n/a" if not values else ("met" if max(map(abs, values)) <= limit else "NOT met")

        rows = [
            ("uncalibrated capacity error, worst (%)", self.capacity, 0.10, "within 10%"),
            ("uncalibrated knob effect error, worst (points)", self.effect_points, 0.05,
             "within 5 points"),
            ("leave-one-out capacity error, worst (%)", self.loo_capacity, 0.05, "within 5%"),
            ("leave-one-out ITL p50 error at passing rates, worst (%)", self.loo_itl_p50, 0.15,
             "within 15%"),
            ("leave-one-out knob effect error, worst (points)", self.loo_effect_points, 0.03,
             "within 3 points"),
        ]  # fmt: skip
        return [f"  {label:<58} {worst(values):>7}  goal {goal:<16} {verdict(values, limit)}"
                for label, values, limit, goal in rows]  # fmt: skip


def effects(
    recordings: list[RecordedSweep], simulated: dict[Path, SweepResult], figures: Figures
) -> list[str]:
    rows = [f"  {'change':<58} {'real':>8} {'simulated':>10} {'predicted':>10}"]
    for other in recordings:
        base = _nearest(other, recordings)
        if base is None or (other.name == "base" and base.name != "base"):
            continue  # the base is the starting point of the changes, not one of them
        if not other.result.config.changes_from(base.result.config):
            continue  # two runs of one configuration (the H200 tunes): no knob moved
        real = (other.result.capacity_rps or 0) / (base.result.capacity_rps or 1)
        sim_base = simulated[base.source].capacity_rps or 1
        sim = (simulated[other.source].capacity_rps or 0) / sim_base
        figures.effect_points.append(sim - real)
        changed, predicted = predicted_ratio(base, other)
        shown = "ruled out" if predicted is None else f"{predicted - 1:+.1%}"
        rows.append(f"  {_label(base) + ' -> ' + other.name + ': ' + changed:<58.58} "
                    f"{real - 1:+8.1%} {sim - 1:+10.1%} {shown:>10}")  # fmt: skip
    return rows


def _itl_errors(recorded: RecordedSweep, simulated: SweepResult) -> list[float]:
    """Relative ITL p50 error at every recorded rate that met the SLO."""
    sim_at = {(p.repeat, p.rate_rps): p for p in simulated.points}
    return [_dist(sim_at[(p.repeat, p.rate_rps)], "itl", 50) / _dist(p, "itl", 50) - 1
            for p in recorded.result.points if p.margin <= 1.0]  # fmt: skip


def leave_one_out(recordings: list[RecordedSweep], figures: Figures) -> list[str]:
    """Fit on every other recording of the same study, replay the one held out."""
    header = f"{'worst ITL p50 error (passing rates)':>36} {'effect real':>12} {'sim':>7}"
    rows = [f"  {'held out':<30} {'real cap':>9} {'sim cap':>8} {'error':>7} {header}"]
    held: dict[Path, SweepResult] = {}
    for out in recordings:
        rest = [r for r in recordings if r is not out
                and r.study_folder == out.study_folder]  # fmt: skip
        if not rest:
            continue
        fitted = calibrate(rest).calibration.efficiency
        held[out.source] = replay(out, fitted)
        # The base replayed with the same fit, for the held-out change's simulated effect.
        base = _nearest(out, recordings)
        base_sim = replay(base, fitted) if base is not None and base is not out else None
        real, sim = out.result.capacity_rps, held[out.source].capacity_rps
        itl_errors = _itl_errors(out, held[out.source])
        figures.loo_itl_p50 += itl_errors
        figures.loo_capacity.append((sim or 0) / (real or 1) - 1)
        itl = max(itl_errors, key=abs, default=0.0)
        effect = ""
        if base is not None and base_sim is not None and base.name == "base":
            real_effect = (real or 0) / (base.result.capacity_rps or 1) - 1
            sim_effect = (sim or 0) / (base_sim.capacity_rps or 1) - 1
            effect = f"{real_effect:+12.1%} {sim_effect:+7.1%}"
            figures.loo_effect_points.append(sim_effect - real_effect)
        rows.append(f"  {_label(out):<30} {real or 0:9.2f} {sim or 0:8.2f} {_err(real, sim):>7} "
                    f"{itl:+36.1%} {effect}")  # fmt: skip
    return rows


SEED_STRIDE = 1000
"""Workload seeds of the other draws ``--seeds`` replays: far from any repeat's own."""


def reseeded(recording: RecordedSweep, shift: int) -> RecordedSweep:
    """The recording's study drawing other requests and arrivals (its workload seed moved)."""
    workload = recording.study.workload
    moved = workload.model_copy(update={"seed": workload.seed + shift})
    return dataclasses.replace(
        recording, study=recording.study.model_copy(update={"workload": moved})
    )


def seed_spread(recordings: list[RecordedSweep], seeds: int) -> list[str]:
    """Each recording's uncalibrated capacity error replayed with its own requests (what the
    real engine was sent) and with ``seeds - 1`` other draws of the same workload: how far
    one sweep's arrivals alone move a capacity, real or simulated."""
    rows = [f"  {'recording':<30} {'own draw':>9} {'other draws':>30} {'spread':>8}"]
    for rec in recordings:
        real = rec.result.capacity_rps or 1.0
        replayed = [replay(reseeded(rec, SEED_STRIDE * k)) for k in range(seeds)]
        errors = [(r.capacity_rps or 0.0) / real - 1 for r in replayed]
        others = " ".join(f"{e:+6.1%}" for e in errors[1:])
        spread = statistics.pstdev(errors)
        rows.append(f"  {_label(rec):<30} {errors[0]:+9.1%} {others:>30} {spread:8.1%}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="recordings (default: shared)")
    parser.add_argument("--seeds", type=int, default=1, help="also replay this many draws in all")
    parser.add_argument(
        "--uncalibrated",
        action="store_true",
        help="stop before the leave-one-out calibrations (most of the time)",
    )
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    roots = args.paths or [p for p in DEFAULT_PATHS if p.exists()]
    recordings = find_recorded(roots)
    if not args.paths:  # the simulator prices GPU steps: CPU recordings measure the trust rules
        skipped = [r.name for r in recordings if r.study.gpu.is_cpu]
        recordings = [r for r in recordings if not r.study.gpu.is_cpu]
        if skipped:
            print(f"left out, recorded on a CPU: {', '.join(skipped)}")
    started = time.perf_counter()
    simulated = {r.source: replay(r) for r in recordings}
    print(f"{len(recordings)} recordings from {', '.join(map(str, roots))}; "
          f"replayed in {time.perf_counter() - started:.0f} s\n")  # fmt: skip
    figures = Figures()
    print(f"  {'recording':<30} {'real capacity':>14} {'simulated':>10} {'error':>7}")
    for r in recordings:
        real, sim = r.result.capacity_rps, simulated[r.source].capacity_rps
        figures.capacity.append((sim or 0) / (real or 1) - 1)
        print(f"  {_label(r):<30} {real or 0:14.2f} {sim or 0:10.2f} {_err(real, sim):>7}")
    if args.seeds > 1:
        print(f"\nuncalibrated capacity error, the recording's own requests and {args.seeds - 1} "
              "other draws of its workload:")  # fmt: skip
        print("\n".join(seed_spread(recordings, args.seeds)))
    for r in recordings:
        print(f"\n{_label(r)} ({r.source}): real/simulated")
        print("\n".join(rate_table(r, simulated[r.source])))
    print("\nknob effects on SLO capacity (real engine, simulator, kneepoint's prediction):")
    print("\n".join(effects(recordings, simulated, figures)))
    if args.uncalibrated:
        return
    started = time.perf_counter()
    print("\ncalibrated, leave-one-out (fitted on the study's other recordings):")
    print("\n".join(leave_one_out(recordings, figures)))
    print(f"  (fitted and replayed in {time.perf_counter() - started:.0f} s)")
    print("\nsummary against the fidelity goals:")
    print("\n".join(figures.summary()))


if __name__ == "__main__":
    main()
