"""`kneepoint tune` end to end on the simulator: the run folder, the ledger, the winner, the
report, budgets, and plain answers when nothing can help or the input is wrong."""

from __future__ import annotations

import gzip
import json
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import yaml

from kneepoint.cli.main import main
from kneepoint.records.ledger import (
    Baseline,
    BurstChecked,
    Finished,
    Proposed,
    RunStarted,
    Screened,
)
from kneepoint.records.measure import RequestRecord
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from tests.support.chromium import HEADLESS, chromium

from .conftest import CONFIGS, QUICKSTART, SMALL, TuneRun, kneepoint_main

REPORT_SECTIONS = (
    "## Summary", "## What binds and why", "## Latency vs load", "## Signals at the knee",
    "## Fleet and price", "## Burst recovery", "## Speed per user against throughput per GPU",
    "## Knobs pruned and why", "## Trials", "## How well the predictions held up",
)  # fmt: skip


def run_dir(runs: Path) -> Path:
    (found,) = runs.iterdir()
    return found


@pytest.fixture(scope="module")
def small_run(small_run: TuneRun) -> Path:
    """The session's shared small-tune run (tests/conftest.py), by its folder."""
    return small_run.folder


def test_a_run_leaves_its_folder_ledger_winner_and_report(small_run: Path) -> None:
    events = Ledger(small_run / "ledger.jsonl").read()
    assert isinstance(events[0], RunStarted) and isinstance(events[1], Baseline)
    assert isinstance(events[-2], Finished) and events[-2].reason == "max_trials"
    assert isinstance(events[-1], BurstChecked)  # the winner's burst follows the search
    state = RunState.replay(events)
    assert state.trials_run == 4 and len(state.promotions) >= 2
    assert state.incumbent_objective and state.baseline is not None
    assert state.incumbent_objective > 2 * (state.baseline.repeats.capacity_rps or 0)
    best = yaml.safe_load((small_run / "best.yaml").read_text())["engine"]
    assert best["max_num_seqs"] > 2 and best == state.incumbent.model_dump(  # type: ignore[union-attr]
        mode="json", exclude_defaults=True
    )
    command = (small_run / "best-command.txt").read_text()
    assert command.startswith("vllm serve meta-llama/Llama-3.1-8B") and "--max-num-seqs" in command
    assert yaml.safe_load((small_run / "study.yaml").read_text())["name"] == "small-tune"


def test_every_decision_is_recorded_before_the_next_one(small_run: Path) -> None:
    events = Ledger(small_run / "ledger.jsonl").read()
    proposed = [e.trial for e in events if isinstance(e, Proposed)]
    screened = [e.trial for e in events if isinstance(e, Screened)]
    assert proposed == screened == list(range(1, len(proposed) + 1))
    for event in events:
        if isinstance(event, Screened):
            before = events[: events.index(event)]
            assert any(isinstance(e, Proposed) and e.trial == event.trial for e in before)
            assert event.outcome.status == "ok" or event.outcome.detail


def test_trial_folders_keep_sweeps_and_request_records(small_run: Path) -> None:
    trials = sorted((small_run / "trials").iterdir())
    assert trials[0].name == "000-baseline" and len(trials) == 5
    screen = json.loads((trials[1] / "screen.json").read_text())
    assert screen["kind"] == "screen" and screen["points"]
    records = sorted((trials[1] / "points").glob("screen-*.requests.jsonl.gz"))
    assert records
    with gzip.open(records[0], "rt") as handle:
        first = RequestRecord.model_validate_json(handle.readline())
    assert first.scheduled_s >= 0 and first.traffic_class == "short"


def test_the_markdown_report_has_every_section(small_run: Path) -> None:
    report = (small_run / "report.md").read_text()
    for section in REPORT_SECTIONS:
        assert section in report, section
    assert "Recommended command:" in report and "vllm serve" in report
    assert "running is pinned at max_num_seqs" in report
    assert "Direction right in" in report
    images = ("latency-vs-load", "goodput-vs-load", "signals-at-knee", "pareto", "predictions")
    for image in images:
        assert (small_run / "plots" / f"{image}.png").stat().st_size > 5000
    html = (small_run / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(images) and "<table>" in html
    # Coordinate descent never needed Optuna here: no storage, so the report links none.
    assert not (small_run / "optuna.db").exists() and "optuna.db" not in report


def test_a_finished_run_resumed_does_nothing_more(small_run: Path) -> None:
    before = (small_run / "ledger.jsonl").read_text()
    assert main(["tune", str(small_run)]) == 0
    assert (small_run / "ledger.jsonl").read_text() == before


def _compute_wall_tune(runs: Path, stop: str) -> Path:
    """A compute wall on an H100 with only a scheduling knob to search: nothing acts on it."""
    study = CONFIGS / "scenarios" / "compute-bound.yaml"
    sets = [
        "search.knobs=[async_scheduling]", "tuning.validate_repeats=2", "tuning.screen_seconds=8",
        "tuning.validate_seconds=8", "tuning.start_rps=4", f"tuning.stop={stop}",
    ]  # fmt: skip
    args = ["tune", str(study), "--runs-dir", str(runs)]
    args += [item for s in sets for item in ("--set", s)]
    assert main(args) == 0
    return run_dir(runs)


def test_it_says_plainly_when_nothing_it_can_change_would_help(tmp_path: Path) -> None:
    folder = _compute_wall_tune(tmp_path, "predicted")
    finished = Ledger(folder / "ledger.jsonl").read()[-2]
    assert isinstance(finished, Finished) and finished.reason == "nothing_to_try"
    assert "compute-bound" in finished.detail
    assert "nothing kneepoint can change would help" in (folder / "report.md").read_text()


def test_with_budget_left_it_tries_what_the_rules_ruled_out(tmp_path: Path) -> None:
    """Under the budget stop the ruled-out switch is a long shot: it is flipped once."""
    events = Ledger(_compute_wall_tune(tmp_path, "budget") / "ledger.jsonl").read()
    proposed = [e for e in events if isinstance(e, Proposed)]
    assert [list(p.proposal.changes) for p in proposed] == [["async_scheduling"]]
    assert proposed[0].proposal.proposer == "long-shot"
    finished = events[-2]
    assert isinstance(finished, Finished) and finished.reason == "exhausted"
    assert "every long shot has been tried" in finished.detail
    assert "async_scheduling" in finished.detail


def test_a_device_budget_stops_the_run(tmp_path: Path) -> None:
    args = [
        "tune",
        str(SMALL),
        "--runs-dir",
        str(tmp_path),
        "--set",
        "budget.max_device_hours=0.05",
    ]
    assert main(args) == 0
    *_, finished, burst = Ledger(run_dir(tmp_path) / "ledger.jsonl").read()
    assert isinstance(finished, Finished) and finished.reason == "max_device_hours"
    # nothing more is measured once the budget is spent
    assert isinstance(burst, BurstChecked) and burst.skipped.startswith("the run stopped on")
    assert burst.device_s == 0.0


def test_a_naive_deadline_is_local_time_and_the_run_goes_on(small_run: Path) -> None:
    # The shared run was given a deadline two hours ahead with no offset (the format the
    # validator suggests): it used to pass `config check` and then crash `tune` comparing
    # naive and aware times after the baseline's device time.
    study = yaml.safe_load((small_run / "study.yaml").read_text())
    resolved = datetime.fromisoformat(study["budget"]["deadline"])
    assert resolved.utcoffset() == datetime.now().astimezone().utcoffset()  # stored as local
    state = RunState.replay(Ledger(small_run / "ledger.jsonl").read())
    assert state.started is not None and state.finished is not None
    ahead = resolved - state.started.started_at
    assert timedelta(hours=1, minutes=58) < ahead <= timedelta(hours=2)
    assert state.finished.reason == "max_trials"


@pytest.mark.parametrize(
    ("deadline", "words"),
    [("2000-01-01T00:00:00+00:00", "is already past"),
     (timedelta(minutes=-5), "is already past"),
     (timedelta(minutes=3), "less than one baseline needs")],
)  # fmt: skip
def test_a_deadline_past_or_too_close_is_refused_before_any_server_starts(
    tmp_path: Path, deadline: str | timedelta, words: str
) -> None:
    if isinstance(deadline, timedelta):  # local time, without an offset, as a person writes it
        deadline = (datetime.now() + deadline).strftime("%Y-%m-%dT%H:%M")
    # Over HTTP a baseline of the quickstart takes at least ~11 minutes of load points.
    study = tmp_path / "http.yaml"
    study.write_text(QUICKSTART.read_text().replace("clock: virtual", "clock: http"))
    runs = tmp_path / "runs"
    done = kneepoint_main("tune", study, "--runs-dir", runs, "--set", f"budget.deadline={deadline}")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    # named where the deadline came from: the --set that gave it
    assert line.startswith(f"kneepoint: --set budget.deadline={deadline}: budget.deadline: ")
    assert words in line
    assert not runs.exists()  # nothing started, nothing written


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", str(tmp_path / "missing.yaml")]) == 2
    assert main(["tune", str(tmp_path)]) == 2  # a folder that is not a run
    other = tmp_path / "goodput.yaml"  # goodput at a rate names no rate
    other.write_text(SMALL.read_text() + "objective:\n  kind: goodput_at_rate\n")
    runs = tmp_path / "runs"
    assert main(["tune", str(other), "--runs-dir", str(runs)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("kneepoint: ") for line in errors)
    assert "not a kneepoint run folder" in errors[1]
    assert errors[2].startswith(f"kneepoint: {other}:") and "rate_rps" in errors[2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["goodput.yaml"]  # nothing written


def test_the_html_report_renders_in_headless_chromium(small_run: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    argv = [
        chromium(), *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1200,2400", f"--screenshot={shot}", (small_run / "report.html").as_uri(),
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    pixels = matplotlib.image.imread(shot)[:, :, :3]
    inked = (pixels.min(axis=2) < 0.9).mean()
    # distinct colours, each packed into one integer (np.unique over rows took 3 s)
    rgb = (pixels * 255).astype(np.uint8).reshape(-1, 3).astype(np.uint32)
    colours = len(np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2]))
    assert inked > 0.03 and colours > 100, (inked, colours)  # text, tables and plots drawn


def test_an_optuna_run_links_its_storage(tmp_path: Path) -> None:
    args = ["tune", str(SMALL), "--runs-dir", str(tmp_path), "--set", "tuning.proposer=optuna",
            "--set", "budget.max_trials=1"]  # fmt: skip
    assert main(args) == 0
    folder = run_dir(tmp_path)
    assert (folder / "optuna.db").is_file()
    assert (
        f"optuna-dashboard sqlite:///{folder.resolve()}/optuna.db"
        in (folder / "report.md").read_text()
    )
