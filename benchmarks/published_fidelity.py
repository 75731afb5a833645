"""The simulator against measurements nobody here made: the 38 real vLLM v0.15.1 runs of BLIS's
sim-to-real campaign (tests/fixtures/published/blis-campaign), each run as a kneepoint study
and simulated at its measured stage rates, scored as the campaign scores BLIS-Evolved and
BLIS-Roofline: the absolute percentage error of each stage's (and each whole run's) mean TTFT,
ITL and E2E, and of their p90 and p99, printed beside those two simulators' errors on the same
rows. Nothing is fetched: the ground truth is the fixture's.

With ``--fit`` the named Efficiency constants are fitted on the runs of ``--train`` GPUs (to
the measured mean token gap of each stage, priced over the steps the simulator ran there) and
the runs are simulated again: the figures of the runs fitted on and of the rest are printed
apart, beside the uncalibrated ones.

Run: .venv/bin/python benchmarks/published_fidelity.py [--runs 16 22] [--set FIELD=VALUE]
     [--fit weight_bandwidth,kv_bandwidth --train h100-sxm] [--write-studies DIR]
     (all 38 runs: ~2 minutes on a 2-core host; --fit adds ~4)
Goal: mean TTFT, ITL and E2E MAPE over the 38 runs at most BLIS-Evolved's (18.2 / 10.9 /
10.0%), any fitted constant scored on runs it was not fitted on.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import versions
import yaml

from benchmarks.published_campaign import (
    GENERAL_GAPS,
    METRICS,
    Run,
    Simulated,
    Stage,
    load_runs,
    load_workloads,
    not_expressed,
    simulate,
    study_mapping,
    study_of,
)
from benchmarks.published_fit import fit_constants
from kneepoint.probes.runtime import configure_logging
from kneepoint.records import Efficiency

SOURCES = ("kneepoint", "blis_evolved", "blis_roofline")
SHOWN = {"kneepoint": "kneepoint", "blis_evolved": "BLIS-Evolved", "blis_roofline": "BLIS-Roofline"}
Errors = dict[str, dict[str, list[float]]]
"""source -> metric -> signed relative errors, one per row."""


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def score(run: Run, simulated: list[Simulated]) -> list[tuple[Stage, Simulated]]:
    """Each stage with its simulation, then the whole run with every stage pooled."""
    return [*zip(run.stages, simulated, strict=True), (run.whole, Simulated.pooled(simulated))]


def run_errors(
    rows: list[tuple[Stage, Simulated]], into_whole: Errors, into_stages: Errors
) -> list[str]:
    """Collect each row's errors (the last row is the whole run) and a line per row."""
    lines = []
    for i, (stage, sim) in enumerate(rows):
        whole = i == len(rows) - 1
        target = into_whole if whole else into_stages
        cells = []
        for metric in METRICS:
            key = metric + "_ms"
            measured = stage.measured[key]
            ours = _error(sim.figure(metric, stage.client_output_tokens()), measured)
            target["kneepoint"].setdefault(metric, []).append(ours)
            for source in SOURCES[1:]:
                target[source].setdefault(metric, []).append(
                    _error(getattr(stage, source)[key], measured)
                )
            if metric in ("e2e_mean", "ttft_mean", "itl_mean", "ttft_p99"):
                be = _error(stage.blis_evolved[key], measured)
                cells.append(f"{measured:9.1f} {ours:+7.1%} {be:+7.1%}")
        name = "run" if whole else f"{stage.rate_rps:g}/s"
        failed = f"  {sim.failed} failed" if sim.failed else ""
        lines.append(f"    {name:>7} " + " | ".join(cells) + failed)
    return lines


def simulate_all(
    runs: Sequence[Run], efficiency: Efficiency, quiet: bool = False
) -> dict[int, list[Simulated]]:
    """Every run simulated; a run the simulator cannot run prints why (never scored zero)."""
    workloads = load_workloads()
    out = {}
    for run in runs:
        started = time.perf_counter()
        try:
            out[run.id] = simulate(study_of(run, workloads[run.workload]), run, efficiency)
        except Exception as exc:  # a run that cannot be simulated is named, not scored
            print(f"  run {run.label}: NOT SIMULATED: {type(exc).__name__}: {exc}")
            continue
        if not quiet:
            print(
                f"  run {run.label} simulated in {time.perf_counter() - started:.1f} s", flush=True
            )
    return out


def tables(
    runs: Sequence[Run], simulated: dict[int, list[Simulated]], show: bool = False
) -> tuple[Errors, Errors]:
    """Each simulated run's stage and whole-run errors (whole, stages); ``show`` prints a
    table of them per run."""
    whole: Errors = {s: {} for s in SOURCES}
    stages: Errors = {s: {} for s in SOURCES}
    if show:
        head = " | ".join(
            f"{m:>9} {'kp':>7} {'BLIS-E':>7}"
            for m in ("E2E mean", "TTFT mean", "TTFT p99", "ITL mean")
        )
        print(
            f"\nper run (measured ms, then the error of kneepoint and of BLIS-Evolved):\n"
            f"    {'stage':>7} {head}"
        )
    for run in (r for r in runs if r.id in simulated):
        lines = run_errors(score(run, simulated[run.id]), whole, stages)
        if show:
            setting = f"{run.workload}, {run.max_num_batched_tokens} tokens a step"
            print(f"  {run.label} on {run.gpu} x{run.tensor_parallel_size}, {setting}")
            for gap in not_expressed(run)[len(GENERAL_GAPS) :]:
                print(f"      stands in: {gap}")
            print("\n".join(lines))
    return whole, stages


def mape(errors: Iterable[float]) -> tuple[float, float]:
    """Mean and median absolute percentage error."""
    values = [abs(e) * 100.0 for e in errors]
    return statistics.fmean(values), statistics.median(values)


def summary(title: str, errors: Errors, goal: bool = False) -> list[str]:
    """MAPE (median) of each metric, per source, with BLIS-Evolved's as the goal."""
    count = len(errors["kneepoint"].get("e2e_mean", []))
    lines = [
        f"{title} ({count} rows): MAPE (median)",
        f"  {'':<10}" + "".join(f"{SHOWN[s]:>17}" for s in SOURCES),
    ]
    for metric in METRICS:
        cells = []
        for source in SOURCES:
            mean, median = mape(errors[source][metric])
            cells.append(f"{mean:8.1f}% ({median:4.1f}%)")
        verdict = ""
        if goal and metric in ("e2e_mean", "ttft_mean", "itl_mean"):
            ours, theirs = (mape(errors[s][metric])[0] for s in SOURCES[:2])
            verdict = "  met" if ours <= theirs else "  NOT met"
        lines.append(f"  {metric:<10}" + "".join(f"{c:>17}" for c in cells) + verdict)
    signed = statistics.fmean(errors["kneepoint"]["e2e_mean"]) * 100.0
    lines.append(f"  kneepoint's mean signed E2E error {signed:+.1f}%")
    return lines


def by_gpu(runs: Sequence[Run], simulated: dict[int, list[Simulated]]) -> list[str]:
    """The whole-run MAPE of the three means, per GPU."""
    lines = ["whole runs by GPU: MAPE of mean E2E / TTFT / ITL (kneepoint; BLIS-Evolved)"]
    for gpu in sorted({r.gpu for r in runs}):
        chosen = [r for r in runs if r.gpu == gpu and r.id in simulated]
        errors, _ = tables(chosen, simulated)
        cells = [
            " / ".join(
                f"{mape(errors[source][m])[0]:.1f}" for m in ("e2e_mean", "ttft_mean", "itl_mean")
            )
            for source in SOURCES[:2]
        ]
        lines.append(f"  {gpu:<14} {len(chosen):>2} runs: {cells[0]:<20} ({cells[1]})")
    return lines


def write_studies(runs: Sequence[Run], folder: Path) -> None:
    """Each run's study as a file (``kneepoint sweep`` runs one)."""
    workloads = load_workloads()
    folder.mkdir(parents=True, exist_ok=True)
    for run in runs:
        text = yaml.safe_dump(study_mapping(run, workloads[run.workload]), sort_keys=False)
        gaps = "".join(f"# not expressed: {g}\n" for g in not_expressed(run))
        (folder / f"blis-{run.id}.yaml").write_text(gaps + text)
    print(f"{len(runs)} studies written to {folder}")


def parse_overrides(texts: Sequence[str]) -> Efficiency:
    """``FIELD=VALUE`` overrides of the built-in constants."""
    fields = {}
    for text in texts:
        name, _, value = text.partition("=")
        fields[name] = float(value)
    return Efficiency(**fields)


def report(runs: Sequence[Run], simulated: dict[int, list[Simulated]], title: str) -> None:
    whole, stages = tables(runs, simulated, show=True)
    print()
    print("\n".join(summary(f"{title}, whole runs", whole, goal=len(runs) == 38)))
    print("\n".join(summary(f"{title}, stages", stages)))
    print("\n".join(by_gpu(runs, simulated)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="*", help="run ids (default: all 38)")
    parser.add_argument(
        "--set",
        dest="overrides",
        nargs="*",
        default=[],
        help="FIELD=VALUE: an Efficiency constant for every run",
    )
    parser.add_argument("--fit", help="comma-separated Efficiency fields to fit")
    parser.add_argument(
        "--train",
        nargs="*",
        default=["h100-sxm"],
        help="GPUs whose runs the fit uses (the rest score it)",
    )
    parser.add_argument("--write-studies", type=Path, help="write each run's study here")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    runs = [r for r in load_runs() if not args.runs or r.id in args.runs]
    if args.write_studies:
        write_studies(runs, args.write_studies)
        return
    base = parse_overrides(args.overrides)
    print(f"{len(runs)} runs; stand-ins for what the studies cannot say, in every run:")
    print("\n".join(f"  - {g}" for g in GENERAL_GAPS))
    started = time.perf_counter()
    simulated = simulate_all(runs, base)
    print(f"simulated in {time.perf_counter() - started:.0f} s")
    report(runs, simulated, "uncalibrated")
    if args.fit:
        fit_and_score(runs, simulated, base, args.fit.split(","), args.train)


def fit_and_score(
    runs: Sequence[Run],
    simulated: dict[int, list[Simulated]],
    base: Efficiency,
    fields: list[str],
    train_gpus: list[str],
) -> None:
    """Fit ``fields`` on the runs of ``train_gpus``; print the fitted and held-out figures."""
    train = [r for r in runs if r.gpu in train_gpus and r.id in simulated]
    held = [r for r in runs if r.gpu not in train_gpus and r.id in simulated]
    fitted = fit_constants(train, base, fields)
    shown = ", ".join(f"{f} {getattr(fitted, f):.4g}" for f in fields)
    print(f"\nfitted on {len(train)} runs of {', '.join(train_gpus)}: {shown}")
    again = simulate_all(runs, fitted, quiet=True)
    for title, chosen in (("fitted on", train), ("held out", held)):
        if not chosen:
            continue
        before, after = ({r.id: s[r.id] for r in chosen if r.id in s} for s in (simulated, again))
        for name, sims in (("uncalibrated", before), ("fitted", after)):
            whole, _ = tables(chosen, sims)
            print("\n".join(summary(f"{title}, {name}", whole)))


if __name__ == "__main__":
    main()
