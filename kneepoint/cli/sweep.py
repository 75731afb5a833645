"""``kneepoint sweep``: measure one configuration's latency/load curve and its knee.

Each point is told on stderr as it is measured; the console then gets the curve as a table
(rate, SLO margin, goodput, TTFT/ITL percentiles per class) with the knee marked. The whole
result, every load point included, goes to a JSON file with the study beside it (a recording
``kneepoint diagnose --from`` reads), also when the sweep is interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kneepoint.config import add_overrides_argument, arguments

if TYPE_CHECKING:
    from kneepoint.measure import Watched
    from kneepoint.probes.backends import Prober, Target
    from kneepoint.records import RequestRecord, StudySpec, SweepResult


def add_sweep_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sweep = commands.add_parser(
        "sweep", help="measure one configuration's latency/load curve and its SLO knee"
    )
    sweep.add_argument("file", type=Path, help="the study YAML file")
    sweep.add_argument(
        "--config-set",
        dest="knobs",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="set an engine knob, e.g. max_num_seqs=128",
    )
    add_overrides_argument(sweep, "override any study field")
    sweep.add_argument(
        "--start-rps",
        type=arguments.rate_rps,
        help="first rate of the ramp (default: the study's tuning.start_rps)",
    )
    sweep.add_argument(
        "--seconds",
        type=arguments.seconds,
        help="arrivals per load point (default: the study's "
        "tuning.screen_seconds, as tune's knee search)",
    )
    sweep.add_argument("--out", type=Path, help="JSON result (default: runs/<study>/...)")
    sweep.set_defaults(handler=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    from kneepoint.cli.console import progress_for
    from kneepoint.config import check_output, load_study, parse_override
    from kneepoint.load import PointSize, stable_window
    from kneepoint.measure import Bench, study_knee_search, with_retried
    from kneepoint.records import PointArtifacts, noted
    from kneepoint.report import TRIM
    from kneepoint.run import write_point
    from kneepoint.tune import launch_checks

    knobs = [parse_override(text, "--config-set", ("engine",)) for text in args.knobs]
    overrides = [*args.overrides, *knobs]
    study = load_study(args.file, overrides, launch_checks())
    config = study.engine
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or Path("runs") / f"sweep-{study.name}-{stamp}" / "sweep.json"
    check_output("--out", out)
    kept: dict[float, tuple[RequestRecord, ...]] = {}

    def keep(artifacts: PointArtifacts) -> None:
        kept[artifacts.rate_rps] = artifacts.records
        write_point(out.parent, out.stem, artifacts)

    def search(probe: Prober, _: Target) -> SweepResult:
        kept.clear()  # a retry on a fresh server measures every rate again
        return study_knee_search(probe, study, config, start_rps=args.start_rps)

    seconds = args.seconds or study.tuning.screen_seconds
    progress = progress_for(sys.stderr)
    progress.phase("sweep", f"{study.name}: knee search of {config.fingerprint()}")
    bench = Bench(study, progress)
    where = (out.parent / f"{out.stem}-server", out.stem, seconds)
    with noted(lambda: _kept(bench.watched, out, study)):
        result, _, retried = bench.on_server("sweep", config, where, search, keep=keep)
    result = with_retried(result, retried)
    write_recording(out, study, result)
    warmup_s = PointSize.for_study(study, seconds).warmup_s
    windows = {rate: stable_window(records, TRIM, warmup_s) for rate, records in kept.items()}
    text = render_curve(study, result) + knee_intervals(study, result, windows)
    sys.stdout.write(text + f"\nwritten: {out}\n")
    return 0


def _kept(watched: Watched | None, out: Path, study: StudySpec) -> str:
    """Writes what a sweep stopped early had measured; says where (nothing: '')."""
    if watched is None or not watched.points:
        return ""
    write_recording(out, study, watched.interrupted(study.engine))
    return (
        f"; the {len(watched.points)} points measured are in {out} "
        f"(kneepoint diagnose --from {out})"
    )


def write_recording(out: Path, study: StudySpec, result: SweepResult) -> None:
    """The sweep and, beside it, the study it was measured under: a recording
    ``kneepoint diagnose --from`` and ``kneepoint calibrate`` read."""
    import yaml

    from kneepoint.calibration import study_path_for
    from kneepoint.run import write_atomically

    write_atomically(out, result.model_dump_json(indent=2) + "\n")
    resolved = yaml.safe_dump(study.model_dump(mode="json"), sort_keys=False)
    write_atomically(study_path_for(out), resolved)


def render_curve(study: StudySpec, result: SweepResult) -> str:
    """The curve as a fixed-width table, one row per class per rate, the knee marked."""
    backend = study.backend.kind
    knobs = " ".join(f"{k}={v}" for k, v in result.config.knob_values().items() if k != "model")
    header = (
        f"  {'rate':>8} {'margin':>6} {'goodput':>8}  {'class':<10} {'ttft p50':>9} "
        f"{'ttft p99':>9} {'itl p50':>8} {'itl p95':>8} {'e2e p99':>9}"
    )
    lines = [f"{study.name}: {study.model.name} on {study.gpu.name} ({backend})  {knobs}", header]
    for entry in sorted(result.points, key=lambda p: p.rate_rps):
        point = entry.point
        mark = ">" if entry.rate_rps == result.knee_rps else " "
        flag = "" if entry.counted else f"  ({entry.why_not_counted()})"
        for i, (name, dists) in enumerate(sorted(point.dists.items())):
            head = (
                f"{mark} {entry.rate_rps:8.2f} {entry.margin:6.2f} {point.goodput_rps:8.2f}"
                if i == 0
                else " " * 34
            )
            ttft, itl, e2e = dists["ttft"], dists["itl"], dists["e2e"]
            thin = "" if ttft.resolves(99) else f"  (p99s of {ttft.count} requests: ~max)"
            lines.append(
                f"{head}  {name:<10} {_ms(ttft.p50_ms)} {_ms(ttft.p99_ms)} {_ms(itl.p50_ms, 8)}"
                f" {_ms(itl.p95_ms, 8)} {_ms(e2e.p99_ms)}{thin}{flag if i == 0 else ''}"
            )
    if result.capacity_rps is None:
        lines.append("SLO capacity: no rate tried met the SLO")
    elif result.floor_reason is not None:
        lines.append(
            f"SLO capacity: at least {result.capacity_rps:.2f} req/s, a floor: "
            f"{result.floor_reason} (latencies in ms)"
        )
    else:
        lines.append(
            f"SLO capacity: {result.capacity_rps:.2f} req/s (interpolated; knee "
            f"marked > at {result.knee_rps:.2f} req/s; latencies in ms)"
        )
    if result.interrupted:
        lines.append("(interrupted: the points measured until then)")
    return "\n".join(lines)


def knee_intervals(
    study: StudySpec, result: SweepResult, windows: dict[float, list[RequestRecord]]
) -> str:
    """The SLO percentiles at the knee and the first rate past it, each with its bootstrap
    interval (requests resampled: ``kneepoint.load.bootstrap``)."""
    from kneepoint.report import slo_intervals

    rates = sorted(windows)
    knee = result.knee_rps
    past = [r for r in rates if knee is not None and r > knee]
    lines = []
    for label, rate in (("at the knee", knee), ("first rate past it", past[0] if past else None)):
        if rate is None or rate not in windows:
            continue
        found = slo_intervals(study, [windows[rate]], study.tuning.confidence)
        said = ", ".join(f"{name} {_span(low, high)} ms" for name, (low, high) in found.items())
        if said:
            lines.append(f"  {label}, {rate:.2f} req/s: {said}")
    if not lines:
        return ""
    head = f"\nSLO percentiles with {study.tuning.confidence:.0%} bootstrap intervals:"
    return "\n".join([head, *lines])


def _span(low: float, high: float) -> str:
    return f"{low:.1f}-{'inf' if math.isinf(high) else f'{high:.1f}'}"


def _ms(value: float, width: int = 9) -> str:
    return f"{'inf':>{width}}" if math.isinf(value) else f"{value:{width}.1f}"
