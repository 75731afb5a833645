"""One worker of a shared study: it owns one GPU, claims tasks, carries them out with
``kneepoint tune``'s executor (``kneepoint.tune.execute``) and writes their events to the study;
when no task waits, it plans the next ones (one planner at a time, ``kneepoint.workers.plan``).
Every worker leaves when the study has finished, writing the run's ledger and report.

A worker killed at any moment loses nothing: its claimed task stops heartbeating, and the
next worker to look fails it and Optuna queues it again. One stopped by a signal gives its
task back at once.
"""

from __future__ import annotations

import time

import structlog

from kneepoint.load.objective import rules
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Event
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task, TaskResult
from kneepoint.report import write_report
from kneepoint.run.folder import RunFolder
from kneepoint.run.progress import Progress
from kneepoint.run.state import RunState
from kneepoint.tune.bench import Bench
from kneepoint.tune.decide import CheckBurst, MeasureBaseline, Promote, Screen, trial_action
from kneepoint.tune.execute import Executor, Measure
from kneepoint.tune.loop import Now, local_now
from kneepoint.tune.steps import Steps
from kneepoint.workers.plan import plan
from kneepoint.workers.shared_study import Claimed, SharedStudy
from kneepoint.workers.state import Shared, shared_state

log = structlog.get_logger(__name__)


class Worker:
    def __init__(
        self,
        shared: SharedStudy,
        study: StudySpec,
        folder: RunFolder,
        progress: Progress,
        catalogue: KnobCatalogue,
        *,
        name: str,
        poll_s: float = 2.0,
        vllm_version: str | None = None,
        now: Now = local_now,
    ) -> None:
        self.shared, self.study, self.folder, self.name = shared, study, folder, name
        self.progress, self.catalogue, self.poll_s, self.now = progress, catalogue, poll_s, now
        steps = Steps(study, Bench(study, folder, progress), catalogue, vllm_version)
        self.executor = Executor(study, steps, progress)
        self.tasks_done = 0

    def run(self) -> Shared:
        """Claim, measure and plan until the study has finished; its final state."""
        while True:
            self.shared.seen(self.name, self.now())
            self.shared.fail_stale()
            if self.shared.finished() is not None:
                break
            claimed = self.shared.claim(self.name)
            if claimed is not None:
                self._run(claimed)
            elif not self._plan():
                time.sleep(self.poll_s)
        final = self.state()
        if final.state.incumbent is not None:
            self.folder.write_best(self.study, final.state.incumbent)
        self._write_report(final)
        return final

    def _write_report(self, final: Shared) -> None:
        """The whole run (every worker's trials) as this folder's ledger and report."""
        self.folder.ledger.extend(final.events)
        write_report(self.folder)

    def state(self, *, requeue: bool = False) -> Shared:
        shared = self.shared
        return shared_state(
            self.study,
            shared.started_at(),
            shared.attempts(self.now(), requeue=requeue),
            shared.finished(),
        )

    def _plan(self) -> bool:
        """Queue the next tasks or finish the run; False: nothing to do but wait."""
        with self.shared.planning():
            if self.shared.finished() is not None:
                return True
            now = self.now()
            decided = plan(
                self.state(requeue=True),
                self.study,
                self.catalogue,
                self.shared.live_workers(now),
                now,
            )
            if decided.finished is not None:
                self.shared.finish(decided.finished)
                log.info(
                    "worker.finished",
                    reason=decided.finished.reason,
                    detail=decided.finished.detail,
                )
                self.progress.status(f"finished: {decided.finished.detail}")
                return True
            if decided.tasks:
                self.shared.enqueue(list(decided.tasks))
                log.info("worker.planned", tasks=[t.key for t in decided.tasks])
                return True
            return False

    def _run(self, claimed: Claimed) -> None:
        task = claimed.task
        log.info("worker.claimed", task=task.key, optuna_trial=claimed.number)
        try:
            result, value = self._measure(task, self.state().state)
        except BaseException:
            self.shared.abandon(claimed)  # another worker takes it at once
            raise
        if self.shared.complete(claimed, result, value):
            self.tasks_done += 1
            log.info("worker.completed", task=task.key, value=value)
        else:
            log.warning(
                "worker.result_discarded",
                task=task.key,
                reason="this attempt was presumed dead and queued again",
            )

    def _measure(self, task: Task, state: RunState) -> tuple[TaskResult, float]:
        """The task's events, measured by ``kneepoint tune``'s executor, and its value to Optuna
        (the objective it measured)."""
        if task.kind != "baseline" and task.generation != len(state.promotions):
            raise RuntimeError(
                f"{task.key} was planned against incumbent {task.generation}, "
                f"the study is at {len(state.promotions)}"
            )
        if task.kind == "validate":
            events = self._trial_steps(state, task.trial)
        elif task.kind == "promote":
            events = [self.executor.event(Promote(state.trials[task.trial]), state)]
        else:
            events = [self.executor.event(self._action(task, state), state)]
        result = TaskResult.from_events(events, worker=self.name)
        if result.screened is not None:
            self.progress.status(f"trial {task.trial}: {result.screened.reason}")
        return result, _value(result, self.study)

    @staticmethod
    def _action(task: Task, state: RunState) -> Measure:
        if task.kind == "baseline":
            return MeasureBaseline()
        if task.kind == "burst":
            return CheckBurst()
        return Screen(state.trials[task.trial])

    def _trial_steps(self, state: RunState, number: int) -> list[Event]:
        """A finalist's steps on this GPU: quality check and validation (its promotion is
        the planner's to queue: other finalists may be validating beside it)."""
        events: list[Event] = []
        trial = state.trials[number]
        while trial.next_step() not in (None, "promote"):
            event = self.executor.event(trial_action(trial), state)
            state.apply(event)
            events.append(event)
        return events


def _value(result: TaskResult, study: StudySpec) -> float:
    """What a task measured, for Optuna's view of the shared study."""
    rule = rules(study.objective)
    if result.baseline is not None:
        return rule.value(result.baseline.repeats) or 0.0
    if result.screened is not None:
        return result.screened.outcome.objective or 0.0
    if result.validated is not None and result.validated.challenger is not None:
        return rule.value(result.validated.challenger) or 0.0
    if result.promoted is not None:
        return result.promoted.objective
    if result.burst is not None:
        return result.burst.recovery_s or 0.0
    return 0.0
