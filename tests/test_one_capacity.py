"""One capacity: `tune`'s baseline knee search, `kneepoint sweep`, `kneepoint diagnose` and
`kneepoint diagnose --from` (of the sweep's file and of the tune's run) run the study's one
knee search (kneepoint.measure.study_knee) and read the same SLO capacity from the same points;
what `sweep` writes, `diagnose --from` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SMALL, Ran, TuneRun, kneepoint_main


def _capacity(sweep_json: Path) -> float:
    value = json.loads(sweep_json.read_text())["capacity_rps"]
    assert isinstance(value, float)
    return value


def _run(*args: str) -> Ran:
    done = kneepoint_main(*args)
    assert done.returncode == 0, done.stderr
    return done


def _diagnosis_folder(runs: Path) -> Path:
    (folder,) = runs.iterdir()
    return folder


def test_tune_sweep_diagnose_and_from_read_one_capacity(small_run: TuneRun, tmp_path: Path) -> None:
    tuned = _capacity(small_run.folder / "trials" / "000-baseline" / "knee.json")
    out = tmp_path / "sweep" / "sweep.json"
    swept = _run("sweep", str(SMALL), "--out", str(out))
    assert (out.parent / "study.yaml").is_file()  # a recording `diagnose --from` reads
    assert f"SLO capacity: {tuned:.2f} req/s" in swept.stdout
    live = _run("diagnose", str(SMALL), "--runs-dir", str(tmp_path / "live"))
    from_sweep = _run("diagnose", "--from", str(out), "--runs-dir", str(tmp_path / "from-sweep"))
    from_tune = _run("diagnose", "--from", str(small_run.folder),
                     "--runs-dir", str(tmp_path / "from-tune"))  # fmt: skip
    read = [_capacity(out)] + [
        _capacity(_diagnosis_folder(tmp_path / runs) / "sweep.json")
        for runs in ("live", "from-sweep", "from-tune")
    ]
    assert read == pytest.approx([tuned] * 4, rel=1e-12)
    for done in (live, from_sweep, from_tune):
        assert f"SLO capacity {tuned:.2f} req/s" in done.stdout
    assert f"knee search {tuned:.2f} req/s" in small_run.stderr
