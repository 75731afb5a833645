"""``kneepoint calibrate``: fit the simulator's constants to recorded real sweeps.

    kneepoint calibrate tests/fixtures/real/h100-llama8b-chat --out h100-llama8b.yaml

Each recording is a sweep.json (or a folder holding one) beside, or one folder below, the
study.yaml it was measured under (what `kneepoint diagnose` writes on a real server). Prints
each recorded step against its fitted price, the fit's error, and TTFT at the lowest rates;
writes the calibration a study names with ``calibration: FILE``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from kneepoint.calibration import Fitted
    from kneepoint.records import ReplayScore

log = structlog.get_logger(__name__)


def add_calibrate_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = commands.add_parser(
        "calibrate", help="fit the simulator's constants to recorded real sweeps"
    )
    cmd.add_argument(
        "recordings",
        type=Path,
        nargs="+",
        help="sweep.json files, folders holding one, or folders of such",
    )
    cmd.add_argument("--out", type=Path, required=True, help="the calibration file to write")
    cmd.add_argument(
        "--hold-out",
        type=Path,
        nargs="+",
        default=[],
        metavar="RECORDING",
        help="recordings of the same GPU and model not to fit to: each, and each one fitted "
        "to, is replayed with and without the fit and its errors printed side by side",
    )
    cmd.set_defaults(handler=run_calibrate)


def _table(fitted: Fitted) -> list[str]:
    eff = fitted.calibration.efficiency
    lines = [f"  {'recorded step':<28} {'measured ms':>11} {'fitted ms':>10} {'error':>7}"]
    for s in fitted.samples:
        measured, priced = s.observed_s * 1e3, s.predicted_s(eff) * 1e3
        lines.append(
            f"  {s.label:<28} {measured:11.2f} {priced:10.2f} {priced / measured - 1:+7.1%}"
        )
    lines.append(f"  {'TTFT p50 (lowest rate)':<28} {'measured ms':>11} {'fitted ms':>10}")
    frontend_ms = eff.frontend_latency_s * 1e3
    for c in fitted.ttft:
        lines.append(f"  {c.label:<28} {c.real_ms:11.1f} {c.engine_ms + frontend_ms:10.1f}")
    return lines


def _scores(scores: Sequence[ReplayScore]) -> list[str]:
    """The recordings replayed with and without the fit, those fitted to first."""
    if not scores:
        return []

    def pct(value: float | None, sign: str = "+") -> str:
        return "n/a" if value is None else f"{value:{sign}.1%}"

    lines = [
        "replayed (capacity error, built-in -> fitted; step time rms error, built-in -> fitted):",
        f"  {'recording':<34} {'':<10} {'real req/s':>10} {'capacity':>17} {'steps':>15}",
    ]
    for s in sorted(scores, key=lambda s: not s.fitted):
        real = "n/a" if s.capacity_rps is None else f"{s.capacity_rps:.2f}"
        steps = (
            f"{pct(s.uncalibrated_step_error_rel, '')} -> {pct(s.calibrated_step_error_rel, '')}"
        )
        capacity = f"{pct(s.uncalibrated_error_rel)} -> {pct(s.calibrated_error_rel)}"
        lines.append(
            f"  {s.recording:<34} {'fitted' if s.fitted else 'held out':<10} {real:>10} "
            f"{capacity:>17} {steps:>15}"
        )
    return lines


def run_calibrate(args: argparse.Namespace) -> int:
    import yaml

    from kneepoint.calibration import calibrate, find_recorded
    from kneepoint.config import check_output
    from kneepoint.run import write_atomically

    check_output("--out", args.out)
    recordings = find_recorded(args.recordings)
    held_out = find_recorded(args.hold_out) if args.hold_out else []
    fitted = calibrate(recordings, held_out=held_out)
    found = fitted.calibration
    text = yaml.safe_dump(found.model_dump(mode="json"), sort_keys=False)
    write_atomically(args.out, f"# kneepoint calibrate: {found.gpu} / {found.model}\n{text}")
    log.info("calibration.written", path=str(args.out), step_error_rel=found.step_error_rel)
    eff = found.efficiency
    summary = [
        f"{len(recordings)} recordings, {len(fitted.samples)} steps: {found.gpu} / "
        f"{found.model}, vLLM {found.vllm_version or 'unknown'}",
        *_table(fitted),
        f"fit: steps within {found.step_error_rel:.1%} (rms); API server "
        f"{eff.frontend_latency_s * 1e3:.1f} ms per request (TTFT error {found.ttft_error_ms} "
        f"ms); engine core {eff.cpu_request_s * 1e6:.0f} us of CPU per running sequence; mfu "
        f"{eff.mfu:.2f}, "
        f"weights {eff.weight_bandwidth:.2f} and KV {eff.kv_bandwidth:.2f} of peak bandwidth, fp8 "
        f"GEMMs up to {eff.fp8_gemm_speedup:.2f}x",
        *_scores(found.scores),
        f"written: {args.out} (name it in a study: calibration: {args.out})",
    ]
    sys.stdout.write("\n".join(summary) + "\n")
    return 0
