"""What a person watching `kneepoint tune` sees, through the installed entry point: on a
terminal, one bar per sweep that ends complete however many points the sweep needed, warnings
on lines of their own, and the winner's command itself at the end; off a terminal, plain
timestamped lines from the first moment (an unattended run is never silent for minutes)."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from kneepoint.agent.cli_progress import ConsoleProgress
from kneepoint.agent.logs import configure_logging
from kneepoint.records.loadpoint import LoadPoint

from .conftest import CONFIGS

KNEEPOINT = str(Path(sys.executable).parent / "kneepoint")
# A compute-bound H100 where fp8 weights are the one knob: its quality check is skipped with a
# warning, in the middle of the run's bars.
FP8 = [
    "tune", str(CONFIGS / "scenarios" / "compute-bound.yaml"),
    "--set", "search.knobs=[quantization]", "--set", "tuning.validate_repeats=2",
    "--set", "tuning.screen_seconds=8", "--set", "tuning.validate_seconds=8",
    "--set", "tuning.start_rps=4",
]  # fmt: skip
BAR = re.compile(r"\[[#.]{20}\]")


def _on_a_terminal(args: list[str]) -> tuple[str, str]:
    """(stdout, what the terminal showed on stderr)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([KNEEPOINT, *args], stdout=subprocess.PIPE, stderr=follower,
                            text=True)  # fmt: skip
    os.close(follower)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the program exited
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=300)
    os.close(leader)
    assert proc.returncode == 0, shown.decode()
    return out, shown.decode().replace("\r\n", "\n")


def test_a_terminal_gets_bars_that_finish_and_warnings_on_their_own_lines(tmp_path: Path) -> None:
    out, shown = _on_a_terminal([*FP8, "--runs-dir", str(tmp_path)])
    lines = shown.split("\n")
    finished = [line for line in lines if BAR.search(line)]
    assert finished, shown
    for line in finished:  # each bar's last redraw says it finished, with its point count
        last = line.split("\r")[-1]
        assert re.search(r"\[#{20}\] \d+ points in \d+s", last), line
    warnings = [line for line in lines if "quality.skipped" in line]
    assert warnings and all(not BAR.search(line) for line in warnings)
    assert "serve the winner with (not quality-checked: trial 1):" in out
    [command] = [line for line in out.splitlines() if line.startswith("  vllm serve ")]
    assert command.endswith(" --quantization fp8")


def test_off_a_terminal_every_progress_line_is_plain_and_timestamped(tmp_path: Path) -> None:
    done = subprocess.run([KNEEPOINT, *FP8, "--runs-dir", str(tmp_path)], capture_output=True,
                          text=True, check=True, timeout=300)  # fmt: skip
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    lines = done.stderr.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\dZ > run: compute-bound in .*", lines[0])
    progress = [line for line in lines if not line.startswith("{")]  # JSON lines are log events
    assert all(re.match(r"\d\d:\d\d:\d\dZ ", line) for line in progress)
    assert any("> baseline: knee search" in line for line in progress)
    assert any(re.search(r"knee point 1 r0 +4\.00 req/s: meets SLO", line) for line in progress)
    assert any(" trials left | " in line for line in progress)


def test_a_warning_mid_sweep_ends_the_bar_before_it_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging(level="warning", console_json=True)
    progress = ConsoleProgress(stream)
    progress.sweep("screen", 5)
    point = LoadPoint(
        rate_rps=4.0, window_start_s=0.0, window_end_s=10.0, sent=40, completed=40, failed=0,
        timed_out=0, achieved_rps=4.0, goodput_rps=4.0, meets_slo=True, dists={},
        send_lag_p50_ms=0.1, send_lag_p99_ms=0.5, client_bound=False,
    )  # fmt: skip
    progress.point("screen", 4.0, 0, point)
    structlog.get_logger("kneepoint.test").warning("something.odd", detail="mid-sweep")
    progress.point("screen", 4.4, 0, point)
    progress.status("done")
    lines = stream.getvalue().split("\n")
    [warning] = [line for line in lines if "something.odd" in line]
    assert warning.startswith("{")  # on a line of its own, not after a half-drawn bar
    assert lines[-2] == "  done"
