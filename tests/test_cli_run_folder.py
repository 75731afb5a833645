"""Run folders through the command line: `kneepoint report RUN` on a finished run, on a run
killed mid-trial and on one killed during its baseline (a killed run leaves a prefix of its
ledger, perhaps with a torn last line: that is all a kill can leave); a damaged ledger named by
line with the way forward, and that way (`--repair-ledger`) taken; an empty ledger beside trial
folders refused. Each command runs as the entry point runs it, in-process (what the command
does); an interruption, which is the process's, through the installed entry point."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.records import EXIT_INTERRUPTED
from kneepoint.records.ledger import QualityChecked

from .conftest import KNEEPOINT, QUICKSTART, Ran, TuneRun, kneepoint_main


def kneepoint(*args: str | Path, check: bool = True) -> Ran:
    done = kneepoint_main(*args)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def finished(small_run: TuneRun) -> Path:
    """The session's shared small-tune run (tests/conftest.py), by its folder."""
    return small_run.folder


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
    ledger = (folder / "ledger.jsonl").read_bytes()
    kneepoint("report", folder)
    # A report reads; only the agent drops a torn line (it may be a write still going on).
    assert (folder / "ledger.jsonl").read_bytes() == ledger
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
    after, before = tmp_path / "after.jsonl", tmp_path / "before.jsonl"
    kneepoint("report", finished, "--log-level", "info", "--log-file", after)
    assert main(["--log-level", "info", "--log-file", str(before), "report", str(finished)]) == 0
    assert "report.written" in after.read_text() and "report.written" in before.read_text()


def _garbage_at(finished: Path, into: Path, line: int) -> Path:
    folder = into / finished.name
    shutil.copytree(finished, folder)
    lines = (folder / "ledger.jsonl").read_text().splitlines(keepends=True)
    lines.insert(line - 1, "this is not json\n")
    (folder / "ledger.jsonl").write_text("".join(lines))
    return folder


def test_a_bad_ledger_line_is_named_with_the_way_forward(finished: Path, tmp_path: Path) -> None:
    folder = _garbage_at(finished, tmp_path, 4)
    for command in (["tune", folder], ["report", folder]):
        done = kneepoint(*command, check=False)
        assert done.returncode == 2
        assert done.stderr == (
            f"kneepoint: {folder / 'ledger.jsonl'}:4: not a ledger event (Invalid JSON: "
            "expected ident at line 1 column 2); to resume from the 3 events before it: "
            f"kneepoint tune --resume {folder} --repair-ledger\n"
        )


def test_repair_keeps_the_valid_prefix_moves_the_rest_aside_and_resumes(
    finished: Path, tmp_path: Path
) -> None:
    folder = _garbage_at(finished, tmp_path, 4)
    original = (finished / "ledger.jsonl").read_text().splitlines(keepends=True)
    done = kneepoint("tune", "--resume", folder, "--repair-ledger")
    assert f"kept 3 events; the rest moved to {folder / 'ledger.jsonl.rejected-line4'}" in (
        done.stderr
    )
    aside = (folder / "ledger.jsonl.rejected-line4").read_text()
    assert aside == "this is not json\n" + "".join(original[3:])  # nothing lost
    resumed = (folder / "ledger.jsonl").read_text().splitlines()
    assert resumed[:3] == [line.rstrip("\n") for line in original[:3]]
    # The same run as the untouched one: the loop is deterministic for its seed.
    assert len(resumed) == len(original) and '"event":"finished"' in resumed[-2]
    assert '"event":"burst_checked"' in resumed[-1]
    assert (folder / "best.yaml").read_text() == (finished / "best.yaml").read_text()


def test_an_empty_ledger_beside_trial_folders_is_refused(finished: Path, tmp_path: Path) -> None:
    folder = tmp_path / finished.name
    shutil.copytree(finished, folder)
    (folder / "ledger.jsonl").write_text("")
    before = sorted(p.name for p in (folder / "trials").iterdir())
    done = kneepoint("tune", folder, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "ledger.jsonl is empty but trials/ holds 5 trial folder(s)" in done.stderr
    assert sorted(p.name for p in (folder / "trials").iterdir()) == before
    assert (folder / "ledger.jsonl").read_text() == ""


def test_an_event_out_of_order_is_named_and_repaired(finished: Path, tmp_path: Path) -> None:
    folder = tmp_path / finished.name
    shutil.copytree(finished, folder)
    lines = (folder / "ledger.jsonl").read_text().splitlines(keepends=True)
    lines.insert(5, lines[2])  # a whole, valid event where it cannot be (a hand edit)
    (folder / "ledger.jsonl").write_text("".join(lines))
    done = kneepoint("report", folder, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"ledger.jsonl:6: out of order: a {_kind(lines[2])} event where" in done.stderr
    kneepoint("tune", "--resume", folder, "--repair-ledger")
    assert (folder / "ledger.jsonl.rejected-line6").read_text().startswith(lines[2])


def _kind(line: str) -> str:
    return str(json.loads(line)["event"])


def test_a_ledger_from_before_quality_verdicts_still_reads() -> None:
    # `passed: true` with a "skipped:" reason is how a skipped check was recorded before.
    old = {"event": "quality_checked", "trial": 1, "passed": True, "threshold": 0.9,
           "reason": "skipped: the simulator has no real model outputs"}  # fmt: skip
    checked = QualityChecked.model_validate(old)
    assert checked.verdict == "skipped"
    assert QualityChecked.model_validate({**old, "reason": "99% match"}).verdict == "passed"
    assert QualityChecked.model_validate({**old, "passed": False}).verdict == "failed"


def test_a_finished_run_resumed_says_it_had_finished(finished: Path, tmp_path: Path) -> None:
    folder = tmp_path / finished.name
    shutil.copytree(finished, folder)
    done = kneepoint("tune", folder)
    assert "> resume: " in done.stderr and "it had finished (max trials)" in done.stderr
    events = (folder / "events.jsonl").read_text()
    assert '"phase": "resume"' in events


def _run_folders(runs: Path) -> list[Path]:
    """The run folders in ``runs`` under their final names."""
    return [p for p in runs.glob("*") if not p.name.startswith(".")] if runs.exists() else []


def _wait_for(found: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Until ``found()`` (an event the run logged), or the run ends."""
    while not found():
        if proc.poll() is not None:
            pytest.fail(f"the run ended first (exit {proc.returncode})")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)


def _dumps_stacks() -> dict[str, str]:
    """The environment of a run that prints every thread's stack on SIGABRT."""
    return {**os.environ, "PYTHONFAULTHANDLER": "1"}


HEARS_SIGINT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])",
]
"""A prefix that runs a command with SIGINT at its default, in the same process. A command a
script sends to the background (``&`` without job control) ignores SIGINT, as does all it
starts; so did this suite run that way, and every tune it started ran on past its SIGINT
(five loaded runs of the fast tier in a row, 2026-11-29: the child's SigIgn held SIGINT and
SIGQUIT). A user's Ctrl-C reaches a foreground run, as this child's does now."""


def _stopped(proc: subprocess.Popen[str], timeout_s: float = 120.0) -> str:
    """The run's stderr once it exits; one that has not exited ``timeout_s`` after a SIGINT
    fails the test with its threads' stacks (SIGABRT under ``_dumps_stacks``)."""
    try:
        return proc.communicate(timeout=timeout_s)[1]
    except subprocess.TimeoutExpired:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        ignored = next(line for line in status.splitlines() if line.startswith("SigIgn"))
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate()
        pytest.fail(
            f"still running {timeout_s:.0f} s after SIGINT ({ignored}); its stacks:\n{err[-6000:]}"
        )


def test_an_interruption_and_its_resume_are_events(tmp_path: Path) -> None:
    """A piped console can lose the resume hint with the process group: events.jsonl keeps
    the interruption, and the resume says where it goes on from."""
    runs = tmp_path / "runs"
    # A night's budget (minutes on the virtual clock): the quickstart's own 12 trials ran to
    # their end under a loaded host before this test had read their first point. Optuna's
    # draws keep it going: the walk, its combination and the long shots end "exhausted" after
    # 10 trials, about a minute, and that run too ended first under load (2026-11-28).
    longer = ["--set", "budget={max_trials: 500, max_device_hours: 100}",
              "--set", "tuning.patience=100", "--set", "tuning.proposer=optuna"]  # fmt: skip
    tune = [*HEARS_SIGINT, KNEEPOINT, "tune"]
    proc = subprocess.Popen([*tune, str(QUICKSTART), "--runs-dir", str(runs), *longer],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_dumps_stacks())  # fmt: skip
    # A run folder is built as ``.<name>.partial`` and renamed: wait for its own name.
    _wait_for(lambda: bool(_run_folders(runs)), proc)
    (folder,) = _run_folders(runs)
    events = folder / "events.jsonl"
    _wait_for(lambda: events.exists() and '"event": "run.point"' in events.read_text(), proc)
    proc.send_signal(signal.SIGINT)
    err = _stopped(proc)
    assert proc.returncode == EXIT_INTERRUPTED, err
    logged = events.read_text()
    assert '"phase": "interrupted"' in logged and f"kneepoint tune {folder}" in logged
    resumed = subprocess.Popen([*tune, str(folder)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=_dumps_stacks())  # fmt: skip
    _wait_for(lambda: "it goes on from its last event" in events.read_text(), resumed)
    resumed.send_signal(signal.SIGINT)
    _stopped(resumed)
