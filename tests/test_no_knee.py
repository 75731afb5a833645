"""A run that cannot measure a knee fails, in one line, after its baseline: an SLO no rate can
meet ends the walk down where its misses stop shrinking with nothing queued (the server's
unloaded latency), above the lowest rate the search would try; it exits 1 with the reason,
recommends nothing, and still writes a report that `kneepoint report` can rewrite; a server
that fails every request is reported as failed, never diagnosed."""

from __future__ import annotations

import json
from pathlib import Path

from kneepoint.measure.sweep import LOWEST_SHARE
from tests.conftest import SMALL, Ran, kneepoint_main


def _run(*args: str) -> Ran:
    return kneepoint_main(*args)


def test_an_slo_no_rate_can_meet_fails_the_run_after_its_baseline(tmp_path: Path) -> None:
    done = _run("tune", str(SMALL), "--runs-dir", str(tmp_path), "--set",
                "slo.default.ttft_p99_ms=6")  # fmt: skip
    assert done.returncode == 1, done.stderr
    failure = [line for line in done.stderr.splitlines() if line.startswith("kneepoint:")]
    assert len(failure) == 1 and "no rate met the SLO" in failure[0]
    assert "no rate can meet this SLO" in failure[0]
    assert "serve the winner" not in done.stdout
    (folder,) = tmp_path.iterdir()
    # the start is no winner: best-command.txt held it (2026-12-03)
    assert not (folder / "best-command.txt").exists() and not (folder / "best.yaml").exists()
    knee = json.loads((folder / "trials" / "000-baseline" / "knee.json").read_text())
    rates = [p["rate_rps"] for p in knee["points"]]
    assert knee["capacity_rps"] is None and min(rates) > rates[0] * LOWEST_SHARE
    assert (folder / "report.md").is_file() and (folder / "report.html").is_file()
    # It read "Started at no rate met the SLO (95% interval over 0 repeats)".
    summary = (folder / "report.md").read_text()
    assert "- At the start, no rate met the SLO; " in summary and "Started at no" not in summary
    again = _run("report", str(folder))
    assert again.returncode == 0, again.stderr


def test_a_server_that_fails_every_request_is_not_diagnosed(tmp_path: Path) -> None:
    done = _run("diagnose", str(SMALL), "--runs-dir", str(tmp_path), "--set",
                "backend={kind: sim, faults: {error_5xx_fraction: 1.0}}")  # fmt: skip
    assert done.returncode == 1
    assert "the server failed every request of the point" in done.stderr
    assert "What binds" not in done.stdout
