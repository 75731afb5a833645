"""`kneepoint report RUN` through the installed entry point, on a finished run, on a run killed
mid-trial and on one killed during its baseline (a killed run leaves a prefix of its ledger,
perhaps with a torn last line: that is all a kill can leave)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_tune import SMALL

KNEEPOINT = str(Path(sys.executable).parent / "kneepoint")


def kneepoint(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([KNEEPOINT, *map(str, args)], capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    kneepoint("tune", SMALL, "--runs-dir", runs)
    (folder,) = runs.iterdir()
    return folder


def _killed_copy(finished: Path, into: Path, keep: int, torn: str = "") -> Path:
    """The run as a kill after its first ``keep`` ledger events would have left it."""
    folder = into / finished.name
    shutil.copytree(finished, folder)
    for name in ("report.md", "report.html", "best.yaml", "best-command.txt"):
        (folder / name).unlink()
    shutil.rmtree(folder / "plots")
    lines = (finished / "ledger.jsonl").read_text().splitlines(keepends=True)
    (folder / "ledger.jsonl").write_text("".join(lines[:keep]) + torn)
    return folder


def test_report_rewrites_a_finished_runs_report(finished: Path) -> None:
    before = (finished / "report.md").read_text()
    (finished / "report.md").unlink()
    done = kneepoint("report", finished)
    assert done.stdout.split() == [str(finished / "report.md"), str(finished / "report.html")]
    assert (finished / "report.md").read_text() == before


def test_report_works_on_a_run_killed_mid_trial(finished: Path, tmp_path: Path) -> None:
    lines = (finished / "ledger.jsonl").read_text().splitlines()
    proposed = [i for i, line in enumerate(lines) if '"event":"proposed"' in line]
    # Killed while screening trial 2, halfway through writing a line.
    folder = _killed_copy(finished, tmp_path, proposed[1] + 1, torn='{"event":"scree')
    kneepoint("report", folder)
    report = (folder / "report.md").read_text()
    assert "## Trials" in report and "not measured yet" in report
    assert "Stopped" not in report and "still running or was interrupted" in report


def test_report_works_on_a_run_killed_during_its_baseline(finished: Path, tmp_path: Path) -> None:
    folder = _killed_copy(finished, tmp_path, 1)
    kneepoint("report", folder)
    report = (folder / "report.md").read_text()
    assert "The baseline has not finished" in report
    assert "## Trials" in report
    html = (folder / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")


def test_report_of_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path) -> None:
    done = kneepoint("report", tmp_path, check=False)
    assert done.returncode == 2
    said = "not a kneepoint run folder (no study.yaml and ledger.jsonl)"
    assert done.stderr == f"kneepoint: {tmp_path}: {said}\n"


def test_global_options_go_before_or_after_the_command(finished: Path, tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    kneepoint("report", finished, "--log-level", "info", "--log-file", log)
    kneepoint("--log-level", "info", "report", finished)
    assert log.stat().st_size > 0
