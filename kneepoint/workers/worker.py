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

from kneepoint.load import rules
from kneepoint.measure import Bench, Progress, TrialFailedError
from kneepoint.records import (
    Baseline,
    BurstChecked,
    JoinBaseline,
    KnobCatalogue,
    MeasureRepeats,
    Promoted,
    Screened,
    SearchKnee,
    StudySpec,
    Task,
    TaskResult,
    Validate,
)
from kneepoint.report import write_report
from kneepoint.run import RunFolder
from kneepoint.tune import (
    Executor,
    Now,
    Steps,
    baseline_words,
    local_now,
)
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
        steps = Steps(study, folder, Bench(study, progress), catalogue, vllm_version)
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
        if final.state.incumbent is not None and final.state.incumbent_objective:
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
                self.progress.outcome(f"finished: {decided.finished.detail}")
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
            result, value = self._measure(task, self.state())
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

    def _measure(self, task: Task, shared: Shared) -> tuple[TaskResult, float]:
        """The task's events (or part of a measurement), measured by ``kneepoint tune``'s
        executor, and its value to Optuna (the objective it measured)."""
        state, action = shared.state, task.action
        if not isinstance(action, JoinBaseline) and task.generation != len(state.promotions):
            raise RuntimeError(
                f"{task.key} was planned against incumbent {task.generation}, "
                f"the study is at {len(state.promotions)}"
            )
        match action:
            case SearchKnee() | MeasureRepeats() | JoinBaseline():
                result = self._baseline_task(action, shared)
            case Validate(repeats=(first, _)):
                result = self._validation_task(task, action, first, shared)
            case _:
                events = [self.executor.event(action, state)]
                result = TaskResult.from_events(events, worker=self.name)
        if (screened := result.of(Screened)) is not None:
            self.progress.outcome(f"trial {task.trial}: {screened.reason}")
        return result, _value(result, self.study)

    def _validation_task(
        self, task: Task, action: Validate, first: int, shared: Shared
    ) -> TaskResult:
        """Some of a finalist's validation repeats, judged with the rest once all are in."""
        # the phases before this one (not a part of this phase that happened to finish
        # first: what a repeat's retakes compare with must not depend on timing)
        # (one worker measures whole phases; several, a phase's repeats one a task, and
        # the first validate_repeats count as one phase: an early pair's part is then not
        # among the earlier, whichever finished first)
        phase = first if task.workers == 1 else first - first % self.study.tuning.validate_repeats
        earlier = [p for p in shared.parts.get(task.trial, ()) if p.after <= phase]
        part = self.executor.validation_part(action, shared.state, earlier)
        return TaskResult(part=part, worker=self.name)

    def _baseline_task(
        self, action: SearchKnee | MeasureRepeats | JoinBaseline, shared: Shared
    ) -> TaskResult:
        """The baseline's knee search, some of its repeats, or its Baseline made of them; a
        server that failed them is the run's failure, as in ``kneepoint tune``."""
        steps = self.executor.steps
        knee = next((p for p in shared.baseline_parts if p.repeats == 0), None)
        try:
            match action:
                case SearchKnee():
                    return TaskResult(baseline_part=steps.baseline_knee(), worker=self.name)
                case MeasureRepeats(repeats=(first, n)):
                    assert knee is not None
                    part = steps.baseline_repeats(knee, range(first, first + n))
                    return TaskResult(baseline_part=part, worker=self.name)
        except TrialFailedError as exc:
            return TaskResult(failure=str(exc), worker=self.name)
        assert knee is not None
        repeats = [p for p in shared.baseline_parts if p.repeats > 0]
        baseline = steps.baseline_of(knee, repeats)
        self.progress.outcome(baseline_words(baseline, self.study))
        return TaskResult(events=(baseline,), worker=self.name)


def _value(result: TaskResult, study: StudySpec) -> float:
    """What a task measured, for Optuna's view of the shared study."""
    rule = rules(study.objective)
    part = result.part
    baseline, screened = result.of(Baseline), result.of(Screened)
    promoted, burst = result.of(Promoted), result.of(BurstChecked)
    values = (
        rule.value(baseline.repeats) if baseline else None,
        rule.value(result.baseline_part.sweep) if result.baseline_part else None,
        screened.outcome.objective if screened else None,
        rule.value(part.challenger) if part and part.challenger else None,
        promoted.objective if promoted else None,
        burst.recovery_s if burst else None,
    )
    return next((v for v in values if v is not None), 0.0)
