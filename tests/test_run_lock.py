"""One agent at a time on a run folder: a second is refused in one line naming the holder, the
lock dies with its holder however it dies, and what a dead holder left on disk never blocks."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.run.folder import RunFolder
from kneepoint.run.lock import LOCK_NAME, RunLock, RunLockedError

from .conftest import SMALL, TuneRun

_HOLD = """
import sys, time
from datetime import datetime
from pathlib import Path
from kneepoint.run.lock import RunLock
RunLock.take(Path(sys.argv[1]), datetime.now().astimezone())
print("held", flush=True)
time.sleep(600)
"""


def _holder(folder: Path) -> subprocess.Popen[str]:
    """Another process holding the folder's lock until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_second_agent_is_refused_until_the_holder_is_killed(
    small_run: TuneRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(small_run.folder, run)
    ledger = (run / "ledger.jsonl").read_bytes()
    holder = _holder(run)
    try:
        capsys.readouterr()
        assert main(["tune", "--resume", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(f"kneepoint: {run}: another agent is working on this run")
        assert f"held by pid {holder.pid} on {socket.gethostname()} since " in err
        assert main(["tune", str(run), "--repair-ledger"]) == 2  # refused before it writes
        assert (run / "ledger.jsonl").read_bytes() == ledger
        assert not list(run.glob("ledger.jsonl.rejected-*"))
        assert main(["report", str(run)]) == 0  # a report reads a live run without the lock
    finally:
        _kill(holder)
    # The dead holder's file is still there, naming it, and a half-written file it left too.
    assert f"pid {holder.pid} " in (run / LOCK_NAME).read_text()
    stale = run / "trials" / ".best.yaml.abc123.tmp"
    stale.write_text("half")
    assert main(["tune", "--resume", str(run)]) == 0
    assert not stale.exists()
    assert (run / "ledger.jsonl").read_bytes() == ledger  # finished: nothing more to do


def test_a_new_run_is_locked_from_birth_and_sweeps_only_abandoned_builds(tmp_path: Path) -> None:
    runs, now = tmp_path / "runs", datetime.now().astimezone()
    abandoned, building = runs / ".old-1.partial", runs / ".other-2.partial"
    abandoned.mkdir(parents=True)
    (abandoned / LOCK_NAME).write_text("pid 1 on elsewhere since 2020-01-01T00:00:00+00:00\n")
    building.mkdir()
    holder = _holder(building)
    try:
        folder = RunFolder.create(runs, load_study(SMALL), now)
        assert not abandoned.exists()
        assert building.exists()  # its agent is still building it
    finally:
        _kill(holder)
    with pytest.raises(RunLockedError):
        RunLock.take(folder.path, now)
    folder.release()
    RunLock.take(folder.path, now).release()
