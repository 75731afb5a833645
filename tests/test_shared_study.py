"""The shared study of ``kneepoint worker`` on a real PostgreSQL: one claim per task, a silent
worker's task failed and queued again by Optuna's retry, a presumed-dead worker's result
refused, a task whose every attempt died read as a crashed trial, and the study file kept
whole."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime

import pytest
from optuna.trial import TrialState, create_trial

from kneepoint.config import load_study
from kneepoint.records.actions import Screen
from kneepoint.records.engine import EngineConfig
from kneepoint.records.ledger import Screened
from kneepoint.records.proposal import Outcome, Prediction, Proposal
from kneepoint.records.task import Task, TaskResult
from kneepoint.workers.shared_study import TASK, Claimed, SharedStudy
from kneepoint.workers.state import recorded
from kneepoint.workers.storage import SharedStudyError

from .conftest import CONFIGS

QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"


def _now() -> datetime:
    return datetime.now().astimezone()


def _open(url: str, **options: int) -> SharedStudy:
    settings = {"heartbeat_s": 1, "grace_s": 2, "max_retry": 2, **options}
    return SharedStudy(url, "quickstart", create=True, **settings)


def _screen(trial: int) -> Task:
    config = EngineConfig(model="m", max_num_seqs=512)
    proposal = Proposal(config=config, changes={"max_num_seqs": 512}, proposer="coordinate",
                        reason="max_num_seqs 256 -> 512",
                        prediction=Prediction(capacity_ratio=1.1, reason="r"))  # fmt: skip
    return Task(action=Screen(trial=trial), generation=0, proposal=proposal)


def _result(trial: int, worker: str) -> TaskResult:
    outcome = Outcome(status="ok", objective=10.0, feasible=True)
    return TaskResult(events=(Screened(trial=trial, outcome=outcome, reason="screened"),),
                      worker=worker)  # fmt: skip


SILENT_S = 1.5
"""How long a dead worker's claim stays silent in these tests: past a 1 s grace period (Optuna
counts its grace in whole seconds, from the heartbeats the database stamped)."""


def _die(claimed: Claimed) -> None:
    """What a SIGKILL does to a claim: the heartbeat stops, nothing else happens."""
    claimed._stop.set()
    claimed._beat.join()


def test_only_one_of_two_workers_claims_a_task(postgres_db: str) -> None:
    one, two = _open(postgres_db), _open(postgres_db)
    one.enqueue([_screen(1)])
    claims: list[Claimed | None] = []
    threads = [threading.Thread(target=lambda s=s, i=i: claims.append(s.claim(f"w{i}")))
               for i, s in enumerate((one, two))]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [c for c in claims if c is not None]
    assert len(won) == 1
    assert one.complete(won[0], _result(1, "w"), 10.0)
    [attempts] = two.attempts(_now())
    assert attempts.result is not None and not attempts.pending and attempts.failed == 0


def test_a_silent_workers_task_is_retried_elsewhere_and_its_late_result_refused(
    postgres_db: str,
) -> None:
    dead, alive = _open(postgres_db, grace_s=1), _open(postgres_db, grace_s=1)
    dead.enqueue([_screen(1)])
    claimed = dead.claim("dead")
    assert claimed is not None
    _die(claimed)
    time.sleep(SILENT_S)
    alive.fail_stale()
    retry = alive.claim("alive")
    assert retry is not None and retry.task == claimed.task
    assert retry.number != claimed.number
    assert not dead.complete(claimed, _result(1, "dead"), 99.0), "presumed dead: refused"
    assert alive.complete(retry, _result(1, "alive"), 10.0)
    [attempts] = alive.attempts(_now())
    assert attempts.failed == 1 and not attempts.pending
    assert attempts.result is not None and attempts.result.worker == "alive"
    failed = next(t for t in alive.study.get_trials() if t.number == retry.number)
    assert failed.system_attrs["failed_trial"] == claimed.number


def test_a_task_whose_every_attempt_died_is_a_crashed_trial(postgres_db: str) -> None:
    shared = _open(postgres_db, max_retry=0, grace_s=1)
    shared.enqueue([_screen(1)])
    claimed = shared.claim("dead")
    assert claimed is not None
    _die(claimed)
    time.sleep(SILENT_S)
    shared.fail_stale()
    assert shared.claim("next") is None, "no retry left"
    [attempts] = shared.attempts(_now())
    assert not attempts.pending and attempts.failed == 1 and attempts.result is None
    [screened] = recorded(load_study(QUICKSTART), attempts, [])
    assert isinstance(screened, Screened) and screened.trial == 1
    assert screened.outcome.status == "crashed" and "lost" in screened.reason


def test_a_worker_stopping_gives_its_task_back_at_once(postgres_db: str) -> None:
    shared = _open(postgres_db)
    shared.enqueue([_screen(1)])
    claimed = shared.claim("stopping")
    assert claimed is not None
    shared.abandon(claimed)
    again = shared.claim("other")
    assert again is not None and again.task == claimed.task
    shared.abandon(again)


def test_the_study_file_is_published_once_and_kept(postgres_db: str) -> None:
    study = load_study(QUICKSTART)
    first = _open(postgres_db)
    first.publish(study, _now())
    _open(postgres_db).publish(study, _now())  # the same file joins
    assert _open(postgres_db).spec() == study
    other = study.model_copy(update={"seed": study.seed + 1})
    with pytest.raises(SharedStudyError, match="different study file"):
        _open(postgres_db).publish(other, _now())
    with pytest.raises(SharedStudyError, match="no kneepoint study"):
        SharedStudy(postgres_db, "nobody", heartbeat_s=1, grace_s=2, max_retry=0)


def test_planning_is_one_worker_at_a_time(postgres_db: str) -> None:
    one, two = _open(postgres_db), _open(postgres_db)
    order: list[str] = []
    inside = threading.Event()

    def hold() -> None:
        with one.planning():
            inside.set()
            time.sleep(0.5)
            order.append("one out")

    thread = threading.Thread(target=hold)
    thread.start()
    inside.wait(10)
    with two.planning():
        order.append("two in")
    thread.join()
    assert order == ["one out", "two in"]


def test_only_postgresql_is_shared() -> None:
    with pytest.raises(SharedStudyError, match="kneepoint tune"):
        SharedStudy("sqlite:///x.db", "s", heartbeat_s=1, grace_s=2, max_retry=0)


def test_a_task_another_version_queued_is_one_line_not_a_traceback(postgres_db: str) -> None:
    """Before a task carried its step as a record it said ``kind``; a worker of this version
    joining such a study names the study, the trial and the mismatch."""
    shared = _open(postgres_db)
    old = {"kind": "screen", "trial": 1, "generation": 0}
    shared.study.add_trial(create_trial(state=TrialState.WAITING,
                                        user_attrs={TASK: json.dumps(old)}))  # fmt: skip
    with pytest.raises(SharedStudyError):
        shared.claim("w0")
    assert shared.study.trials[0].state == TrialState.WAITING, "not claimed"
    with pytest.raises(SharedStudyError) as info:
        shared.attempts(_now())
    assert info.value.flag == "--study"
    assert re.fullmatch(
        r"quickstart: Optuna trial 0's kneepoint\.task cannot be read by kneepoint \S+ "
        r"\(action: Field required\); every worker of a shared study must run the kneepoint "
        r"version that queued its tasks",
        info.value.message,
    )
