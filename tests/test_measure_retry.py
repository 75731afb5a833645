"""Every command measures through one harness (``kneepoint.measure.bench``): ``kneepoint
sweep`` and ``kneepoint diagnose`` of a launched server measure again on a fresh server after a
crash, as ``tune`` does, and say a second crash in one line; an attached server, which has no
fresh one to give, is never retried."""

from __future__ import annotations

import json
from pathlib import Path

from kneepoint.config import load_study
from kneepoint.measure.bench import Bench
from kneepoint.measure.progress import LogProgress
from tests.conftest import SMALL, Ran, kneepoint_main


def _run(command: str, tmp_path: Path, launches: list[int]) -> Ran:
    faults = json.dumps({"crash_after_s": 5, "launches": launches})
    where = (
        ["--out", str(tmp_path / "sweep.json")]
        if command == "sweep"
        else ["--runs-dir", str(tmp_path)]
    )
    return kneepoint_main(command, str(SMALL), *where, "--set", f"backend.faults={faults}")


def _recorded(tmp_path: Path) -> dict[str, object]:
    (path,) = tmp_path.rglob("sweep.json")
    recorded: dict[str, object] = json.loads(path.read_text())
    return recorded


def test_a_sweep_whose_server_crashes_is_measured_again_on_a_fresh_one(tmp_path: Path) -> None:
    done = _run("sweep", tmp_path, [1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "again on a fresh server" in done.stderr
    recorded = _recorded(tmp_path)
    (cause,) = recorded["retried"]  # type: ignore[misc]
    assert cause.startswith("crashed") and "illegal memory access" in cause
    assert recorded["capacity_rps"] and not recorded["interrupted"]


def test_a_diagnosis_whose_server_crashes_is_measured_again(tmp_path: Path) -> None:
    done = _run("diagnose", tmp_path, [1])
    assert done.returncode == 0, done.stderr[-2000:]
    (cause,) = _recorded(tmp_path)["retried"]  # type: ignore[misc]
    assert cause.startswith("crashed")
    assert "What binds" in done.stdout


def test_a_second_crash_is_said_in_one_line_with_the_first(tmp_path: Path) -> None:
    done = _run("sweep", tmp_path, [1, 2])
    assert done.returncode == 1
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("kneepoint: ")]
    assert line.startswith("kneepoint: the server failed: crashed")
    assert "(on a fresh server; the first failed: the server failed: crashed" in line


def test_an_attached_server_is_never_retried() -> None:
    attached = load_study(SMALL, ["backend={kind: attach, url: 'http://127.0.0.1:9'}"])
    launched = load_study(SMALL)
    assert Bench(attached, LogProgress()).retries == 0
    assert Bench(launched, LogProgress()).retries == launched.tuning.transient_retries >= 1
