"""The shared study of ``kneepoint worker``: one Optuna study in PostgreSQL holding a tuning
run's study file, its tasks (one Optuna trial each) and their results.

Claiming a task is Optuna's WAITING -> RUNNING transition, which the RDB storage makes under a
row lock, so two workers never claim one task. A claimed task heartbeats; any worker fails a
task whose heartbeat went silent (``fail_stale_trials``) and Optuna's
``RetryHeartbeatStaleTrialCallback`` queues it again, with its task, for another worker. A result
is written only while its attempt is still RUNNING: one from a worker presumed dead is
refused, so no task completes twice. Planning (what to queue next) is done by one worker at a
time, under a PostgreSQL advisory lock that dies with its connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

import optuna
import structlog
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState, create_trial
from pydantic import ValidationError

from kneepoint import __version__
from kneepoint.config import first_problem
from kneepoint.records import Finished, StudySpec, Task, TaskResult
from kneepoint.workers.advisory_lock import advisory_lock, lock_key
from kneepoint.workers.storage import SharedStudyError, first_line, opened, quiet

log = structlog.get_logger(__name__)

TASK, RESULT, WORKER = "kneepoint.task", "kneepoint.result", "kneepoint.worker"
SPEC, STARTED, FINISHED = "kneepoint.study", "kneepoint.started_at", "kneepoint.finished"
SEEN = "kneepoint.seen."
R = TypeVar("R", Task, TaskResult)


class StudyNotFoundError(SharedStudyError):
    """No kneepoint study of this name is in the storage (yet)."""


def published_start(open_study: Callable[[str], SharedStudy], name: str) -> datetime | None:
    """When the shared study of this name started; None: it is not in the storage, or not
    published yet (a first worker's study file then sets the start)."""
    try:
        shared = open_study(name)
    except StudyNotFoundError:
        return None
    return shared.started_at() if shared.published() else None


@dataclass(frozen=True)
class Attempts:
    """Every attempt at one task: its result if one completed, and how many failed."""

    task: Task
    result: TaskResult | None
    pending: bool
    """An attempt is waiting or running."""
    failed: int


@dataclass
class Claimed:
    trial_id: int
    number: int
    task: Task
    _stop: threading.Event
    _beat: threading.Thread


class SharedStudy:
    def __init__(
        self,
        url: str,
        name: str,
        *,
        heartbeat_s: int,
        grace_s: int,
        max_retry: int,
        create: bool = False,
    ) -> None:
        self.max_retry, self.grace_s, self.heartbeat_s = max_retry, grace_s, heartbeat_s
        self.name = name
        how = {"heartbeat_s": heartbeat_s, "grace_s": grace_s, "max_retry": max_retry}
        with opened(url, **how) as (self.storage, self.retry):
            self.study = self._study(create)

    def _study(self, create: bool) -> optuna.Study:
        if create:
            return optuna.create_study(
                storage=self.storage,
                study_name=self.name,
                direction="maximize",
                load_if_exists=True,
            )
        try:
            return optuna.load_study(study_name=self.name, storage=self.storage)
        except KeyError:
            raise StudyNotFoundError("--study", _absent(self.name)) from None

    # -- the study file ----------------------------------------------------------------
    def publish(self, spec: StudySpec, now: datetime) -> None:
        """Put the study file into a new shared study; joining with another one is refused."""
        mine = spec.model_dump(mode="json")
        if not self.published():
            with self.planning():
                if not self.published():
                    self.study.set_user_attr(STARTED, now.isoformat())
                    self.study.set_user_attr(SPEC, mine)
                    return
        if self.study.user_attrs[SPEC] != mine:
            raise SharedStudyError(
                "--study",
                f"{spec.name}: the shared study of this name was "
                "published from a different study file",
            )

    def published(self) -> bool:
        return SPEC in self.study.user_attrs

    def spec(self) -> StudySpec:
        attrs = self.study.user_attrs
        if SPEC not in attrs:
            raise StudyNotFoundError("--study", _absent(self.name))
        return StudySpec.model_validate(attrs[SPEC])

    def started_at(self) -> datetime:
        return datetime.fromisoformat(str(self.study.user_attrs[STARTED]))

    # -- workers -----------------------------------------------------------------------
    def seen(self, worker: str, now: datetime) -> None:
        self.study.set_user_attr(SEEN + worker, now.isoformat())

    def live_workers(self, now: datetime) -> int:
        """Workers seen within the grace period (each says so at least every heartbeat)."""
        since = now - timedelta(seconds=self.grace_s)
        seen = [
            datetime.fromisoformat(str(v))
            for k, v in self.study.user_attrs.items()
            if k.startswith(SEEN)
        ]
        return sum(t >= since for t in seen)

    # -- tasks -------------------------------------------------------------------------
    def attempts(self, now: datetime, *, requeue: bool = False) -> list[Attempts]:
        """Every task and where its attempts stand, in the order it was queued. ``requeue``
        (the planner, under its lock): queue again a task whose retry was never queued."""
        by_key: dict[str, tuple[Task, list[FrozenTrial]]] = {}
        for trial in self.study.get_trials(deepcopy=False):
            if TASK in trial.user_attrs:
                task = self._read(Task, trial, TASK)
                by_key.setdefault(task.key, (task, []))[1].append(trial)
        return [self._attempts(task, trials, now, requeue) for task, trials in by_key.values()]

    def _read(self, record: type[R], trial: FrozenTrial, attr: str) -> R:
        """A task or result as this kneepoint reads it; one it cannot read (written by another
        version, whose records had another shape) is said in one line."""
        try:
            return record.model_validate_json(str(trial.user_attrs[attr]))
        except ValidationError as exc:
            raise SharedStudyError(
                "--study",
                f"{self.name}: Optuna trial {trial.number}'s {attr} cannot be read by kneepoint "
                f"{__version__} ({first_problem(exc)}); every worker of a shared study "
                "must run the kneepoint version that queued its tasks",
            ) from None

    def _attempts(
        self, task: Task, trials: list[FrozenTrial], now: datetime, requeue: bool
    ) -> Attempts:
        done = [t for t in trials if t.state == TrialState.COMPLETE and RESULT in t.user_attrs]
        result = self._read(TaskResult, done[0], RESULT) if done else None
        failed = [t for t in trials if t.state == TrialState.FAIL]
        pending = any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in trials)
        last = max((t.datetime_complete for t in failed if t.datetime_complete), default=None)
        if failed and not pending and result is None and len(failed) <= self.max_retry:
            # A worker that failed a stale attempt died before queueing its retry: queue it.
            assert last is not None
            late = now.replace(tzinfo=None) - last > timedelta(seconds=self.grace_s)
            if requeue and late:
                self.retry(self.study, failed[-1])
            pending = True
        return Attempts(task, result, pending, len(failed))

    def enqueue(self, tasks: list[Task]) -> None:
        for task in tasks:
            attrs = {TASK: task.model_dump_json()}
            self.study.add_trial(create_trial(state=TrialState.WAITING, user_attrs=attrs))

    def fail_stale(self) -> None:
        """Fail every task whose worker went silent; Optuna queues each again."""
        with quiet():
            optuna.storages.fail_stale_trials(self.study)

    def claim(self, worker: str) -> Claimed | None:
        """The oldest waiting task, now running here with a heartbeat; None: none waits."""
        waiting = self.storage.get_all_trials(
            self.study._study_id, deepcopy=False, states=(TrialState.WAITING,)
        )
        for trial in sorted(waiting, key=lambda t: t.number):
            if TASK not in trial.user_attrs:
                continue
            task = self._read(Task, trial, TASK)  # before claiming: one it cannot read stays
            try:
                if not self.storage.set_trial_state_values(trial._trial_id, TrialState.RUNNING):
                    continue
            except UpdateFinishedTrialError:
                continue
            self.storage.record_heartbeat(trial._trial_id)
            self.storage.set_trial_user_attr(trial._trial_id, WORKER, worker)
            return self._beating(trial, task)
        return None

    def _beating(self, trial: FrozenTrial, task: Task) -> Claimed:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                try:
                    self.storage.record_heartbeat(trial._trial_id)
                except Exception as exc:  # a blip: the grace period covers missed beats
                    log.warning("worker.heartbeat_failed", error=first_line(exc))

        thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
        thread.start()
        return Claimed(trial._trial_id, trial.number, task, stop, thread)

    def complete(self, claimed: Claimed, result: TaskResult, value: float) -> bool:
        """Record the result; False when this attempt was presumed dead (and re-queued)."""
        _stop(claimed)
        try:
            self.storage.set_trial_user_attr(claimed.trial_id, RESULT, result.model_dump_json())
            return self.storage.set_trial_state_values(
                claimed.trial_id, TrialState.COMPLETE, [value]
            )
        except UpdateFinishedTrialError:
            return False

    def abandon(self, claimed: Claimed) -> None:
        """Give the task back at once (this worker is stopping): failed, and queued again."""
        _stop(claimed)
        try:
            if self.storage.set_trial_state_values(claimed.trial_id, TrialState.FAIL):
                self.retry(self.study, self.storage.get_trial(claimed.trial_id))
        except UpdateFinishedTrialError:
            pass

    # -- the end -----------------------------------------------------------------------
    def finished(self) -> Finished | None:
        raw = self.study.user_attrs.get(FINISHED)
        return None if raw is None else Finished.model_validate(raw)

    def finish(self, finished: Finished) -> None:
        self.study.set_user_attr(FINISHED, finished.model_dump(mode="json"))

    def planning(self) -> AbstractContextManager[None]:
        """One planner at a time, across every worker of this study."""
        return advisory_lock(self.storage.engine, lock_key(self.name))


def _absent(name: str) -> str:
    return (
        f"{name}: no kneepoint study of this name in the storage; give the study file to publish it"
    )


def _stop(claimed: Claimed) -> None:
    claimed._stop.set()
    claimed._beat.join()
