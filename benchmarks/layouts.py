"""Layouts on a node, on the virtual clock (issue "Step 18", part 2): data-parallel replicas
against one wide server, and a tune that narrows a wide one.

1. Llama-3.1-8B chat on H100s at TP 1 with 1, 2, 4 and 8 replicas behind vLLM 0.32's balancer
   (``kneepoint.sim.replicas``): each layout's simulated SLO capacity beside that many times
   one replica's (the balancer's loss), and TP 8 as one server for contrast.
2. ``configs/studies/llama8b-8gpu.yaml`` tuned (TP 8 on eight GPUs, per GPU): each measured
   move's price beside its measurement (goal: within 1.25x), and the command it serves.

Run: .venv/bin/python benchmarks/layouts.py   (about two minutes)
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kneepoint.cli.main import main  # noqa: E402
from kneepoint.config import load_study  # noqa: E402
from kneepoint.planning.predict import predict  # noqa: E402
from kneepoint.probes.runtime import configure_logging  # noqa: E402
from kneepoint.run.folder import RunFolder  # noqa: E402
from kneepoint.run.state import RunState  # noqa: E402

STUDY = REPO / "configs" / "studies" / "llama8b-8gpu.yaml"
GOAL = 1.25


def replicas() -> None:
    study = load_study(STUDY)
    print(f"{'layout':<14} {'SLO capacity':>13} {'x one replica':>14}")
    one = None
    for tp, dp in ((1, 1), (1, 2), (1, 4), (1, 8), (8, 1)):
        config = study.engine.replace(tensor_parallel_size=tp, data_parallel_size=dp)
        start = 40.0 * dp / tp if tp == 1 else 50.0
        capacity = predict(study.model_copy(update={"engine": config}), None, start).capacity_rps
        if one is None:
            one = capacity
        share = f"{(capacity or 0.0) / (dp * one):.2f}x" if one and tp == 1 else "-"
        print(f"TP {tp} x DP {dp:<5} {capacity or 0.0:>10.1f} r/s {share:>14}")


def tune() -> None:
    with tempfile.TemporaryDirectory() as runs:
        with contextlib.redirect_stdout(io.StringIO()):  # the tune's console
            assert main(["tune", str(STUDY), "--runs-dir", runs]) == 0
        (folder,) = Path(runs).iterdir()
        study = load_study(STUDY)
        state = RunState.replay(RunFolder(folder).ledger.read(), study.objective)
        print(f"\n{'move':<44} {'priced':>7} {'measured':>9} {'apart':>6}")
        for proposal, measured in state.measured_moves():
            price = proposal.prediction.capacity_ratio
            apart = max(price, measured) / min(price, measured)
            flag = "" if apart <= GOAL else "  over the goal"
            move = ", ".join(f"{knob} -> {value}" for knob, value in proposal.changes.items())
            print(f"{move:<44} {price:>6.2f}x {measured:>8.2f}x {apart:>5.2f}x{flag}")
        print("\nserves: " + (folder / "best-command.txt").read_text().strip())


if __name__ == "__main__":
    configure_logging("warning")
    replicas()
    tune()
