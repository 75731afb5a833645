"""Killing the agent with SIGKILL at random moments and resuming gives the same run as one left
alone: the same trials in the same order with the same results, the same final incumbent, and
no trial lost or repeated."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.kill_resume import differences, run_folders, tune

from .conftest import SMALL, TuneRun

MAX_KILLS = 8


@pytest.mark.slow  # eight kills and resumes (~25 s); benchmarks/kill_resume.py does 20, one each
def test_sigkill_at_random_moments_then_resume_gives_the_same_run(tmp_path: Path) -> None:
    reference_runs, killed_runs = tmp_path / "reference", tmp_path / "killed"
    assert tune(SMALL, reference_runs).wait(timeout=600) == 0
    (reference,) = run_folders(reference_runs)

    rng, kills = random.Random(11), 0
    while True:
        folders = run_folders(killed_runs)
        proc = tune(folders[0] if folders else SMALL, killed_runs)
        if kills < MAX_KILLS and _progressed(proc, killed_runs, _ledger_bytes(killed_runs)):
            time.sleep(rng.uniform(0.0, 0.3))  # a random moment past its first new decision
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                continue
        assert proc.wait(timeout=600) == 0
        break
    assert kills >= 3  # the run really was cut short, more than once
    (resumed,) = run_folders(killed_runs)
    assert differences(resumed, reference) == []


def _ledger_bytes(runs: Path) -> int:
    """How much the run's ledger holds (0 before its folder exists)."""
    ledgers = list(runs.glob("*/ledger.jsonl"))
    return ledgers[0].stat().st_size if ledgers else 0


def _progressed(proc: subprocess.Popen[bytes], runs: Path, before: int) -> bool:
    """Wait until the (re)started run records a decision of its own, not on the clock:
    whether it did before it ended."""
    while proc.poll() is None:
        if _ledger_bytes(runs) > before:
            return True
        time.sleep(0.01)
    return False


def test_sigterm_stops_the_server_with_the_agent_and_the_run_resumes(tmp_path: Path) -> None:
    study = tmp_path / "http.yaml"
    study.write_text(SMALL.read_text().replace("clock: virtual", "clock: http"))
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kneepoint.cli.main", "tune", str(study), "--runs-dir", str(runs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not _server_pids(runs) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    servers = _server_pids(runs)
    assert servers, "a simulated server was started"
    time.sleep(1.0)  # mid-measurement
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert proc.stderr is not None and b"resume with: kneepoint tune" in proc.stderr.read()
    for pid in servers:  # the whole group went with the agent, and no pid file is left
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert not _server_pids(runs)


def test_sigkill_of_the_agent_takes_its_server_down_too(tmp_path: Path) -> None:
    # kill -9 runs no handler: only the watchdog, woken by the agent's end of a pipe closing,
    # can stop the server (which on a GPU would otherwise hold it until someone resumes).
    study = tmp_path / "http.yaml"
    study.write_text(SMALL.read_text().replace("clock: virtual", "clock: http"))
    runs = tmp_path / "runs"
    proc = tune(study, runs)
    deadline = time.monotonic() + 120
    while not _server_pids(runs) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    servers = _server_pids(runs)
    assert servers, "a simulated server was started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    gone_by = time.monotonic() + 20
    while time.monotonic() < gone_by and (
        _server_pids(runs) or any(_group_exists(pid) for pid in servers)
    ):
        time.sleep(0.1)
    assert not any(_group_exists(pid) for pid in servers)
    assert not _server_pids(runs)  # the watchdog removed the pid file it acted on


def _group_exists(pgid: int) -> bool:
    """A live (not zombie) process in group ``pgid``: an orphaned zombie is dead, whether or
    not this machine's init has reaped it yet."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _server_pids(runs: Path) -> list[int]:
    found = []
    for pid_file in runs.rglob("*.pid"):
        text = pid_file.read_text().split()
        if text and text[0].isdigit():
            found.append(int(text[0]))
    return found


def test_the_comparison_sees_a_lost_trial_and_a_changed_winner(
    small_run: TuneRun, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(small_run.folder, run)
    assert differences(run, small_run.folder) == []
    lines = (run / "ledger.jsonl").read_text().splitlines(keepends=True)
    last_proposed = max(i for i, line in enumerate(lines) if '"event":"proposed"' in line)
    (run / "ledger.jsonl").write_text("".join(lines[:last_proposed]))
    (run / "best.yaml").write_text("engine: {max_num_seqs: 1}\n")
    assert differences(run, small_run.folder) == [
        "trials differ",
        "finished differently",
        "best.yaml differs",
    ]
