"""`kneepoint diagnose`: what binds and what would help, from a study or a running server,
without changing a knob."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from kneepoint.calibration.recorded import load_recorded
from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.probes.server.process import ServerProcess, free_port
from kneepoint.run.folder import RunFolder

from .conftest import CONFIGS, SMALL, kneepoint_main


@pytest.mark.slow  # a full knee search of agent sessions (~25 s)
def test_a_study_is_diagnosed_with_the_knobs_worth_trying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = CONFIGS / "scenarios" / "cache-bound.yaml"
    assert main(["diagnose", str(study), "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cache-bound, confidence" in out and "preemptions/s" in out
    (folder,) = tmp_path.iterdir()
    found = json.loads((folder / "diagnosis.json").read_text())
    assert found["diagnosis"]["binding"] == "cache"
    worth = [c["knob"]["name"] for c in found["pruning"]["candidates"]]
    assert "kv_cache_memory_bytes" in worth and "quantization" not in worth
    assert (folder / "diagnosis.md").read_text().startswith("# kneepoint diagnosis")


def test_a_known_knee_costs_two_points(tmp_path: Path) -> None:
    study = CONFIGS / "scenarios" / "scheduling-bound.yaml"
    args = ["diagnose", str(study), "--runs-dir", str(tmp_path), "--knee-rps", "80"]
    assert main(args) == 0
    (folder,) = tmp_path.iterdir()
    sweep = json.loads((folder / "sweep.json").read_text())
    assert [round(p["rate_rps"]) for p in sweep["points"]] == [48, 96]
    assert json.loads((folder / "diagnosis.json").read_text())["diagnosis"]["binding"] == (
        "scheduling"
    )
    recorded = load_recorded(folder)  # the folder is a recording calibrate can fit to
    assert recorded.study.gpu.name == "h100-sxm" and len(recorded.result.points) == 2
    report = (folder / "diagnosis.md").read_text()  # the SLO and what its verdicts mean
    assert report.index("## Service-level objective") < report.index("## What binds")
    assert "| no: " in report  # the point past the knee says what it missed


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "kneepoint.cli.main", "sim", "serve", "--gpu", "h100",
            "--model", "llama-3.2-1b", "--port", str(port), "--max-num-seqs", "16",
            "--max-model-len", "8192", "--no-async-scheduling"]  # fmt: skip
    with ServerProcess(argv, tmp_path_factory.mktemp("server") / "server.log") as proc:
        url = f"http://127.0.0.1:{port}"
        proc.wait_healthy(url, timeout_s=60)
        yield url


@pytest.mark.slow  # a minute of simulated serving over HTTP in real time
def test_a_running_server_is_diagnosed_over_http_without_a_study_file(
    running: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["diagnose", "--url", running, "--gpu", "h100-sxm", "--model", "llama-3.2-1b",
            "--knee-rps", "30", "--runs-dir", str(tmp_path),
            "--set", "engine.max_num_seqs=16", "--set", "engine.max_model_len=8192",
            "--set", "tuning.screen_seconds=6"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "(GPU, attach)" in out
    (folder,) = tmp_path.iterdir()
    found = json.loads((folder / "diagnosis.json").read_text())
    points = json.loads((folder / "sweep.json").read_text())["points"]
    if all(p["point"]["host_busy"] for p in points):
        # Real time on a host other work held: the right verdict is that it could not tell
        # (the slow tier beside a loaded fast tier, 2026-12-03, read "underloaded" before).
        assert found["diagnosis"]["binding"] == "host_busy"
        return
    assert found["diagnosis"]["binding"] == "scheduling", found["diagnosis"]["scores"]
    assert found["diagnosis"]["scheduling_kind"] == "admission_cap"
    # Advice for the server's owner: kneepoint cannot change an attached server, but says what
    # would help.
    assert found["pruning"]["candidates"][0]["knob"]["name"] == "max_num_seqs"


def test_without_a_study_the_missing_flags_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "kneepoint: kneepoint diagnose: without a study file, give --gpu, --model"


def test_a_server_that_refuses_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A diagnosis that measured nothing left a folder holding only its study.yaml."""
    args = ["diagnose", "--url", "http://127.0.0.1:9", "--gpu", "h100-sxm", "--model",
            "llama-3.2-1b", "--runs-dir", str(tmp_path)]  # fmt: skip
    assert main(args) != 0
    assert "does not answer" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


REAL_BASE = Path(__file__).parent / "fixtures" / "real" / "h100-llama8b-chat" / "base"


def test_a_real_recording_is_read_again_with_no_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["diagnose", "--from", str(REAL_BASE / "sweep.json"), "--runs-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    # At 44 req/s the cap was 90% full with requests waiting; kneepoint at b0c96fd called it
    # an admission cap (1.35x predicted for max_num_seqs); the real 4x cap measured +1.3%.
    assert "compute-bound, confidence" in out
    assert "raising max_num_seqs 256 is predicted at 1.00x" in out
    (folder,) = tmp_path.iterdir()
    assert json.loads((folder / "diagnosis.json").read_text())["diagnosis"]["binding"] == (
        "compute"
    )
    assert load_recorded(folder).result.capacity_rps == pytest.approx(40.31, abs=0.01)


def test_a_diagnose_folder_read_again_gives_the_same_verdict(tmp_path: Path) -> None:
    study = CONFIGS / "scenarios" / "scheduling-bound.yaml"
    live = tmp_path / "live"
    assert main(["diagnose", str(study), "--runs-dir", str(live), "--knee-rps", "80"]) == 0
    (measured,) = live.iterdir()
    again = tmp_path / "again"
    assert main(["diagnose", "--from", str(measured), "--runs-dir", str(again)]) == 0
    (reread,) = again.iterdir()
    for name in ("diagnosis.json", "diagnosis.md"):
        assert (reread / name).read_text() == (measured / name).read_text()


def test_a_tune_run_is_read_at_its_baseline(tmp_path: Path) -> None:
    study = load_study(REAL_BASE.parent / "study.yaml")
    run = RunFolder.create(tmp_path / "runs", study, datetime(2026, 11, 22, 12, 0)).path
    (run / "trials" / "000-baseline").mkdir(parents=True)
    (run / "trials" / "000-baseline" / "knee.json").write_text(
        (REAL_BASE / "sweep.json").read_text()
    )
    assert main(["diagnose", "--from", str(run), "--runs-dir", str(tmp_path / "out")]) == 0
    (folder,) = (tmp_path / "out").iterdir()
    assert json.loads((folder / "diagnosis.json").read_text())["diagnosis"]["binding"] == (
        "compute"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--from", "nowhere"], "nowhere: neither a sweep.json nor a folder with one"),
        (["--from", str(REAL_BASE), "--url", "http://127.0.0.1:9"],
         "kneepoint diagnose: --from reads a recording: give no study file and no --url with it"),
    ],
)  # fmt: skip
def test_a_bad_recording_is_refused_in_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["diagnose", *extra, "--runs-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"kneepoint: {message}"
    assert not any(tmp_path.iterdir())


def test_a_rate_out_of_any_moves_reach_is_said_as_tune_says_it(tmp_path: Path) -> None:
    """A goodput-at-rate study ~34x past the server's SLO capacity: diagnose says what tune's
    stop says (kneepoint.load.out_of_reach), not only 0.00, and what to set instead."""
    far = "objective={kind: goodput_at_rate, rate_rps: 100}"
    done = kneepoint_main("diagnose", SMALL, "--runs-dir", tmp_path, "--set", far)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Out of reach: the objective's rate, 100 req/s, is " in done.stdout
    assert "Set objective.rate_rps near what the server holds" in done.stdout
    near = "objective={kind: goodput_at_rate, rate_rps: 3}"
    done = kneepoint_main("diagnose", SMALL, "--runs-dir", tmp_path / "near", "--set", near)
    assert done.returncode == 0 and "Out of reach" not in done.stdout
