"""The shared study's PostgreSQL storage, opened: Optuna's RDB storage with trial heartbeats
and the callback that queues a stale trial again, its tables created by one worker at a time,
and every way opening it (or the study in it) fails said in one line about ``--storage``
(the driver's own words, or the package to install)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import optuna
import sqlalchemy
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

from kneepoint.config import ConfigError, Problem
from kneepoint.workers.advisory_lock import SCHEMA_LOCK, advisory_lock


class SharedStudyError(ConfigError, ValueError):
    """The storage or the study a flag names cannot be used: one line for the user."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__([Problem(flag, None, (), message)])
        self.flag, self.message = flag, message


@contextmanager
def opened(
    url: str, *, heartbeat_s: int, grace_s: int, max_retry: int
) -> Iterator[tuple[RDBStorage, RetryHeartbeatStaleTrialCallback]]:
    """The storage at ``url`` (PostgreSQL only) and its stale-trial callback, held under the
    schema lock while the caller opens its study there; what fails inside is said in one line
    too."""
    if not url.startswith("postgresql"):
        raise SharedStudyError(
            "--storage",
            f"{url.split(':', 1)[0]}: workers share a PostgreSQL study "
            "(postgresql+psycopg://...); a run on one machine is kneepoint tune",
        )
    with quiet():
        retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
    engine = None
    try:
        # Workers started together would race to create Optuna's tables: one at a time.
        engine = sqlalchemy.create_engine(url)
        with advisory_lock(engine, SCHEMA_LOCK), quiet():
            storage = RDBStorage(
                url,
                heartbeat_interval=heartbeat_s,
                grace_period=grace_s,
                heartbeat_stale_trial_callback=retry,
            )
            yield storage, retry
    except sqlalchemy.exc.SQLAlchemyError as exc:  # said in one line, driver's words
        raise SharedStudyError("--storage", f"cannot open it: {first_line(exc)}") from exc
    except ImportError as exc:
        raise SharedStudyError(
            "--storage",
            f"its driver is not installed ({exc.name}): pip install 'kneepoint[workers]'",
        ) from exc
    finally:
        if engine is not None:
            engine.dispose()


@contextmanager
def quiet() -> Iterator[None]:
    """Optuna marks heartbeats experimental; the warning says nothing to a worker's user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return lines[0]
