"""What a person watching `kneepoint tune` sees, through the installed entry point: on a
terminal, one bar per sweep that ends complete however many points the sweep needed, warnings
on lines of their own, and the winner's command itself at the end; off a terminal, plain
timestamped lines from the first moment (an unattended run is never silent for minutes).
The runs are the session's shared ones (tests/conftest.py)."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
import structlog

from kneepoint.cli.console import ConsoleProgress, LineProgress
from kneepoint.measure.progress import duration
from kneepoint.probes.runtime import configure_logging
from kneepoint.records.loadpoint import LoadPoint

from .conftest import TuneRun

BAR = re.compile(r"\[[#.]{20}\]")


def test_a_terminal_gets_bars_that_finish_and_warnings_on_their_own_lines(
    fp8_run: TuneRun,
) -> None:
    lines = fp8_run.stderr.split("\n")
    finished = [line for line in lines if BAR.search(line)]
    assert finished, fp8_run.stderr
    for line in finished:  # each bar's last redraw says it finished, with its point count
        last = line.split("\r")[-1]
        assert re.search(r"\[#{20}\] \d+ points? in \d+", last), line
    warnings = [line for line in lines if "quality.skipped" in line]
    assert warnings and all(not BAR.search(line) for line in warnings)
    out = fp8_run.stdout
    assert "serve the winner with (not quality-checked: trial 1):" in out
    [command] = [line for line in out.splitlines() if line.startswith("  vllm serve ")]
    assert command.endswith(" --quantization fp8")


def test_off_a_terminal_every_progress_line_is_plain_and_timestamped(small_run: TuneRun) -> None:
    stderr = small_run.stderr
    assert "\r" not in stderr and "\x1b" not in stderr
    lines = stderr.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\dZ > run: small-tune in .*", lines[0])
    progress = [line for line in lines if not line.startswith("{")]  # JSON lines are log events
    assert all(re.match(r"\d\d:\d\d:\d\dZ ", line) for line in progress)
    assert any("> baseline: knee search" in line for line in progress)
    assert any(
        re.search(
            r"knee point 1 r0 +2\.00 req/s: meets SLO by the window's percentiles; per request, ",
            line,
        )
        for line in progress
    )
    assert any(" trials left | " in line for line in progress)


def test_a_warning_mid_sweep_ends_the_bar_before_it_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging(level="warning")
    progress = ConsoleProgress(stream)
    progress.sweep("screen", 5)
    point = _point(4.0)
    progress.point("screen", 4.0, 0, point)
    structlog.get_logger("kneepoint.test").warning("something.odd", detail="mid-sweep")
    progress.point("screen", 4.4, 0, point)
    progress.status("done")
    lines = stream.getvalue().split("\n")
    [warning] = [line for line in lines if "something.odd" in line]
    assert re.match(r"\d\d:\d\d:\d\dZ warning", warning)  # its own line, not after a bar
    assert lines[-2] == "  done"


def test_a_warning_off_a_terminal_is_a_plain_line_like_the_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A raw JSON warning sat inside the plain progress log (issue "Step 17").
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging(level="warning")
    structlog.get_logger("kneepoint.test").warning("something.odd", detail="mid-sweep")
    (line,) = stream.getvalue().splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\dZ warning: something\.odd detail=mid-sweep", line)


def test_progress_events_at_info_level_do_not_finish_the_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging(level="info")  # --log-level info on a terminal
    progress = ConsoleProgress(stream)
    progress.sweep("screen", 5)
    for rate in (4.0, 4.4, 4.8):
        progress.point("screen", rate, 0, _point(rate))
    assert "points in" not in stream.getvalue()  # no bar finished early, once per point


@pytest.mark.parametrize(
    ("seconds", "shown"), [(59.7, "1m00s"), (119.7, "2m00s"), (45, "45s"), (8000, "2h13m")]
)
def test_durations_round_before_they_are_split(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


def _point(rate: float) -> LoadPoint:
    return LoadPoint(
        rate_rps=rate, window_start_s=0.0, window_end_s=10.0, sent=40, completed=40, failed=0,
        timed_out=0, achieved_rps=rate, goodput_rps=rate, meets_slo=True, dists={},
        send_lag_p50_ms=0.1, send_lag_p99_ms=0.5, client_bound=False,
    )  # fmt: skip


def test_counts_reach_their_total_or_say_the_sweep_stopped_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """'15/21' once stood as a sweep's last line, and '~Ns left' jumped: the first point's
    time (the server's start) was spread over every point left."""
    clock = iter([0.0, 0.0, 100.0, 110.0, 120.0, 125.0, 200.0, 201.0, 202.0])
    monkeypatch.setattr("kneepoint.cli.console.time.monotonic", lambda: next(clock))
    stream = io.StringIO()
    progress = LineProgress(stream)
    progress.sweep("screen", 5)  # t=0; points at 100 (server start), 110, 120
    for rate in (4.0, 4.4, 4.8):
        progress.point("screen", rate, 0, _point(rate))
    progress.phase("diagnose", "one point past 10 req/s and one below", 2)  # ends at 125
    for rate in (5.0, 20.0):
        progress.point("diagnose", rate, 0, _point(rate))
    lines = [line[10:] for line in stream.getvalue().splitlines()]  # past the time stamp
    assert lines[0].startswith("  screen 1 of ≤5 r0 ") and "left" not in lines[0]
    assert lines[1].endswith(", up to ~30s left") and " 2 of ≤5 " in lines[1]
    assert lines[2].endswith(", up to ~20s left")
    assert lines[3] == "  screen done: 3 points in 2m05s (planned at most 5)"
    assert lines[5].startswith("  diagnose 1 of ≤2 r0 ")
    assert lines[6].startswith("  diagnose 2 of ≤2 r0 ") and "left" not in lines[6]


def test_a_validated_trials_line_reads_its_ratio_from_its_pairs(small_run: TuneRun) -> None:
    """The ratio beside a validated trial's verdict is the paired gain the verdict was read
    from, not its validation over the incumbent's repeats measured before."""
    events = [json.loads(line) for line in (small_run.folder / "ledger.jsonl").open()]
    judged = {
        e["trial"]: e["judgement"]["gain_rel"]
        for e in events
        if e["event"] == "validated" and (e.get("judgement") or {}).get("gain_rel") is not None
    }
    assert judged, "small-tune validates a trial"
    for trial, gain in judged.items():
        line = next(ln for ln in small_run.stderr.splitlines() if f"  trial {trial}: " in ln)
        assert f"measured {1.0 + gain:.2f}x in its pairs)" in line, line
