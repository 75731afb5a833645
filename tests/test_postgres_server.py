"""The PostgreSQL test server (tests/support/postgres_server.py) under Optuna's RDB storage: what
the scale-out workers rely on, a claim only one of them wins, heartbeats that go stale on
the server's clock, and a database of each test's own."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import optuna
import psycopg
import pytest
import sqlalchemy
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from tests.support.postgres_server import SUPERUSER, PostgresServer, require_bindir

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Heartbeats and their retry callback are marked experimental in Optuna.
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _storage(url: str) -> RDBStorage:
    return RDBStorage(
        url,
        heartbeat_interval=1,
        grace_period=2,
        heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=2),
    )


def _waiting(storage: RDBStorage, study_id: int) -> list[int]:
    trials = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.WAITING,))
    return [t._trial_id for t in trials]


def test_the_binaries_are_found() -> None:
    bindir = require_bindir()
    assert (bindir / "initdb").is_file()
    assert (bindir / "pg_ctl").is_file()


def test_the_url_names_psycopg_on_loopback(postgres_url: str) -> None:
    url = sqlalchemy.make_url(postgres_url)
    assert (url.drivername, url.host, url.username, url.database) == (
        "postgresql+psycopg", "127.0.0.1", SUPERUSER, "kneepoint")  # fmt: skip
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("SHOW listen_addresses")).scalar() == "127.0.0.1"
        assert conn.execute(sqlalchemy.text("SHOW server_encoding")).scalar() == "UTF8"
    engine.dispose()


def test_only_one_of_two_storages_claims_a_waiting_trial(postgres_db: str) -> None:
    first = _storage(postgres_db)
    study = optuna.create_study(storage=first, study_name="claims", direction="maximize")
    for value in range(20):
        study.enqueue_trial({"max_num_seqs": value})
    second = _storage(postgres_db)
    study_id = second.get_study_id_from_name("claims")
    trial_ids = _waiting(second, study_id)
    assert len(trial_ids) == 20

    barrier = threading.Barrier(2)

    def claim(storage: RDBStorage, trial_id: int) -> bool:
        barrier.wait()
        return storage.set_trial_state_values(trial_id, TrialState.RUNNING)

    with ThreadPoolExecutor(2) as pool:
        for trial_id in trial_ids:
            won = list(pool.map(claim, (first, second), (trial_id, trial_id)))
            assert sorted(won) == [False, True], trial_id
    assert _waiting(first, study_id) == []
    first.engine.dispose()
    second.engine.dispose()


def test_a_silent_claim_goes_stale_and_is_retried(postgres_db: str) -> None:
    storage = _storage(postgres_db)
    study = optuna.create_study(storage=storage, study_name="stale", direction="maximize")
    study.enqueue_trial({"max_num_seqs": 256})
    (trial_id,) = _waiting(storage, study._study_id)
    assert storage.set_trial_state_values(trial_id, TrialState.RUNNING)
    storage.record_heartbeat(trial_id)

    optuna.storages.fail_stale_trials(study)  # just beat: within its grace period
    assert storage.get_trial(trial_id).state == TrialState.RUNNING

    # The server's clock, not a sleep: the last beat 10 s ago, past the 2 s grace period.
    with psycopg.connect(postgres_db.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("UPDATE trial_heartbeats SET heartbeat = heartbeat - interval '10 s'")
    optuna.storages.fail_stale_trials(study)
    assert storage.get_trial(trial_id).state == TrialState.FAIL
    (retry,) = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert retry.system_attrs["fixed_params"] == {"max_num_seqs": 256}  # as enqueued
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == 0
    storage.engine.dispose()


def test_each_test_database_is_its_own(postgres_server: PostgresServer) -> None:
    one = postgres_server.create_database("independent_one")
    two = postgres_server.create_database("independent_two")
    try:
        first, second = _storage(one), _storage(two)
        optuna.create_study(storage=first, study_name="shared-name")
        assert [s.study_name for s in optuna.get_all_study_summaries(second)] == []
        optuna.create_study(storage=second, study_name="shared-name")  # no clash
        first.engine.dispose()
        second.engine.dispose()
    finally:
        postgres_server.drop_database("independent_one")
        postgres_server.drop_database("independent_two")
