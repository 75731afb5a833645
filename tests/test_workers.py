"""``kneepoint worker`` on a real PostgreSQL: three workers on simulated GPUs tune the
quickstart study, one is killed (SIGKILL) in the middle of a screen; its task is failed by
the others' heartbeat check, queued again by Optuna and finished elsewhere, no task completes
twice, no configuration is screened twice, and the winner is as good as a sequential
``kneepoint tune``'s. Bad input is one line and exit 2."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.records.actions import Screen
from kneepoint.records.ledger import BurstChecked, Event, Finished
from kneepoint.records.task import Task
from kneepoint.run.folder import RunFolder
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.workers.shared_study import RESULT, TASK, WORKER, SharedStudy
from kneepoint.workers.state import shared_state

from .conftest import QUICKSTART, SMALL, TuneRun

WORKER_OPTIONS = ["--heartbeat-s", "1", "--grace-s", "4", "--poll-s", "0.3"]
WALK_ONLY = "tuning.stop=predicted"
"""The kill test compares the workers' first promotion with tune's, on the walk alone. Past
their first round the two walks part: three workers validate the first round's finalists
side by side and promote the best (fp8 weights, +8.4%, over 1,024-token chunks, +6.6%),
where tune promotes the first it validates (the chunks), and from fp8 each of the chunks
and 512 sequences measures flat alone (44.75 req/s) while after the chunks 512 sequences
gains 13.7% (53.80; 2026-11-29). Under the budget's stop each goes on into Optuna, whose
proposals depend on the history each has (issue "Step 16", part 3)."""


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--study", str(QUICKSTART)], "--storage: give the shared storage's URL"),
        (["--storage", "sqlite:///x.db", "--study", str(QUICKSTART)], "kneepoint tune"),
        (["--storage", "postgresql+psycopg://u@127.0.0.1:1/db", "--study", str(QUICKSTART)],
         "--storage: cannot open it"),
        (["--storage", "postgresql+psycopg://u@h/db", "--study", "s", "--grace-s", "1"],
         "the grace period longer"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("KNEEPOINT_STORAGE", raising=False)
    assert main(["worker", "--runs-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("kneepoint: ")]
    assert len(lines) == 1 and says in lines[0], err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir()), "nothing written"


def test_an_unknown_study_name_is_one_line(
    postgres_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", "--storage", postgres_db, "--study", "nobody", "--runs-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "no kneepoint study of this name" in capsys.readouterr().err


def _worker(url: str, gpu: int, tmp_path: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "kneepoint.cli.main", "worker", "--storage", url, "--study",
            str(QUICKSTART), "--gpu", str(gpu), "--runs-dir", str(tmp_path / "runs"),
            *WORKER_OPTIONS, "--set", WALK_ONLY]  # fmt: skip
    log = (tmp_path / f"worker{gpu}.err").open("w")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True,
                            start_new_session=True)  # fmt: skip


def _kill_one_mid_screen(
    url: str, workers: dict[int, subprocess.Popen[str]]
) -> tuple[int, FrozenTrial]:
    """SIGKILL the worker running the first screen, while it runs; its GPU and attempt."""
    storage = RDBStorage(url)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            study_id = storage.get_study_id_from_name("quickstart")
        except KeyError:  # not published yet
            time.sleep(0.1)
            continue
        for trial in storage.get_all_trials(study_id):
            attrs = trial.user_attrs
            if trial.state != TrialState.RUNNING or WORKER not in attrs:
                continue
            if not isinstance(Task.model_validate_json(str(attrs[TASK])).action, Screen):
                continue
            pid = int(str(attrs[WORKER]).rsplit("/", 1)[-1])
            [gpu] = [g for g, p in workers.items() if p.pid == pid]
            os.killpg(pid, signal.SIGKILL)
            workers[gpu].wait(30)
            return gpu, trial
        time.sleep(0.1)
    raise AssertionError("no worker ever ran a screen")


def _sequential_first_promotion(tmp_path: Path) -> float:
    """What the sequential tune's first promotion measured: the first round is the one both
    runs judge against the same incumbent (past it their walks part, see ``WALK_ONLY``)."""
    argv = ["tune", str(QUICKSTART), "--runs-dir", str(tmp_path / "sequential"), "--set", WALK_ONLY]
    assert main(argv) == 0
    [run] = list((tmp_path / "sequential").iterdir())
    folder = RunFolder.existing(run)
    state = RunState.replay(folder.ledger.recover(), folder.study().objective)
    assert state.promotions
    return state.promotions[0].objective


@pytest.mark.slow
def test_three_workers_one_killed_mid_trial(postgres_db: str, tmp_path: Path) -> None:
    workers = {gpu: _worker(postgres_db, gpu, tmp_path) for gpu in range(3)}
    try:
        killed_gpu, killed = _kill_one_mid_screen(postgres_db, workers)
        outputs = {g: p.communicate(timeout=900)[0] for g, p in workers.items() if g != killed_gpu}
    finally:
        for process in workers.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert all(workers[g].returncode == 0 for g in outputs), outputs
    shared = SharedStudy(
        postgres_db, "quickstart", heartbeat_s=1, grace_s=4, max_retry=2, create=False
    )
    trials = shared.study.get_trials()
    task_of = {t.number: Task.model_validate_json(str(t.user_attrs[TASK])) for t in trials}
    completed = [task_of[t.number].key for t in trials if t.state == TrialState.COMPLETE]
    assert len(completed) == len(set(completed)), "a task completed twice"
    assert set(completed) == {task.key for task in task_of.values()}, "a task never completed"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert [t.state for t in retries] == [TrialState.COMPLETE], "retried once, then done"
    assert task_of[retries[0].number] == task_of[killed.number]
    assert RESULT in retries[0].user_attrs
    assert next(t for t in trials if t.number == killed.number).state == TrialState.FAIL
    tasks = {task.key: task for task in task_of.values()}  # attempts of one task: one task
    screened = [
        t.proposal.key() for t in tasks.values() if t.proposal and isinstance(t.action, Screen)
    ]
    assert len(screened) == len(set(screened)), "a configuration screened twice"

    study = load_study(QUICKSTART, [WALK_ONLY])
    now = datetime.now().astimezone()
    final = shared_state(study, shared.started_at(), shared.attempts(now), shared.finished())
    best = final.state.incumbent_objective
    assert best is not None and final.state.finished is not None
    first = _sequential_first_promotion(tmp_path)
    assert final.state.promotions, "the run promoted nothing"
    won_first = final.state.promotions[0].objective
    assert won_first >= first * (1 - study.tuning.min_effect_rel), (won_first, first)
    for output in outputs.values():
        assert f"-> {best:.2f} after" in output
    for run in (tmp_path / "runs").iterdir():  # the killed worker's folder has no report
        if (run / "report.md").is_file():
            folder = RunFolder.existing(run)
            replayed = RunState.replay(folder.ledger.recover(), study.objective)
            assert replayed.incumbent_objective == best
            assert replayed.trials_run == final.state.trials_run
    assert len(list((tmp_path / "runs").glob("*/report.html"))) == len(outputs)


def test_a_refused_study_writes_nothing_to_the_storage(
    postgres_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["worker", "--storage", postgres_db, "--study", str(QUICKSTART), "--runs-dir",
            str(tmp_path), "--set", "budget.deadline=2020-01-01T00:00:00+00:00"]  # fmt: skip
    assert main(argv) == 2
    assert "deadline" in capsys.readouterr().err
    assert not RDBStorage(postgres_db).get_all_studies(), "no study half-made"
    assert not list(tmp_path.iterdir())


def test_one_worker_writes_the_ledger_tune_writes_burst_check_included(
    postgres_db: str, tmp_path: Path, small_run: TuneRun
) -> None:
    """On small-tune (whose winner passes the burst check), one worker's ledger is
    ``kneepoint tune``'s, event for event: the burst check runs in worker runs too, as the
    last task once the search stopped. Only the host's wall time of each sweep differs, and
    the start (the tune fixture's study sets a deadline two hours ahead of its own start)."""
    argv = ["worker", "--storage", postgres_db, "--study", str(SMALL), "--gpu", "0",
            "--runs-dir", str(tmp_path), *WORKER_OPTIONS]  # fmt: skip
    assert main(argv) == 0
    [run] = list(tmp_path.iterdir())
    events = list(Ledger(run / "ledger.jsonl").read())
    tuned = list(Ledger(small_run.folder / "ledger.jsonl").read())
    assert isinstance(events[-2], Finished) and isinstance(events[-1], BurstChecked)
    assert not events[-1].skipped and events[-1].windows and events[-1].device_s > 0
    assert [_comparable(e) for e in events[1:]] == [_comparable(e) for e in tuned[1:]]


def _comparable(event: Event) -> object:
    """An event without the host's wall time of its sweeps (``elapsed_s``)."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "elapsed_s"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(event.model_dump(mode="json"))


@pytest.mark.slow  # a whole quickstart tune and a whole worker run (~45 s)
def test_one_worker_writes_the_ledger_tune_writes_on_the_quickstart(
    postgres_db: str, tmp_path: Path
) -> None:
    assert main(["tune", str(QUICKSTART), "--runs-dir", str(tmp_path / "tune")]) == 0
    argv = ["worker", "--storage", postgres_db, "--study", str(QUICKSTART), "--gpu", "0",
            "--runs-dir", str(tmp_path / "worker"), *WORKER_OPTIONS]  # fmt: skip
    assert main(argv) == 0
    [tuned], [worked] = (list((tmp_path / d).iterdir()) for d in ("tune", "worker"))
    events = [_comparable(e) for e in Ledger(worked / "ledger.jsonl").read()]
    assert events[1:] == [_comparable(e) for e in Ledger(tuned / "ledger.jsonl").read()][1:]
