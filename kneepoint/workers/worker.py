"""One worker of a shared study: it owns one GPU, claims tasks, measures them with the same
steps as ``kneepoint tune`` and writes their results to the study; when no task waits, it
plans the next ones (one planner at a time, ``kneepoint.workers.plan``). Every worker
leaves when the study has finished.

A worker killed at any moment loses nothing: its claimed task stops heartbeating, and the
next worker to look fails it and Optuna queues it again. One stopped by a signal gives its
task back at once.
"""

from __future__ import annotations

import time

import structlog

from kneepoint.load.objective import rules
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.study import StudySpec
from kneepoint.records.task import Task, TaskResult
from kneepoint.report import write_report
from kneepoint.run.folder import RunFolder
from kneepoint.run.progress import Progress
from kneepoint.run.state import RunState, StateError
from kneepoint.tune.bench import Bench
from kneepoint.tune.burst_step import check_burst
from kneepoint.tune.loop import Now, local_now
from kneepoint.tune.steps import Steps
from kneepoint.tune.trial_failure import TrialFailedError
from kneepoint.workers.plan import plan
from kneepoint.workers.shared_study import Claimed, SharedStudy
from kneepoint.workers.state import Shared, ledger_events, shared_state

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
        self.steps = Steps(study, Bench(study, folder, progress), catalogue, vllm_version)
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
        self._write_report(final.state)
        return final

    def _write_report(self, state: RunState) -> None:
        """The whole run (every worker's trials) as this folder's ledger and report."""
        events = ledger_events(state)
        try:
            RunState.replay(events, self.study.objective)
        except StateError as exc:  # never expected; the results stay in the study
            log.warning("worker.no_report", reason=str(exc))
            return
        for event in events:
            self.folder.ledger.append(event)
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
        if task.kind == "baseline":
            return self._baseline()
        if task.generation != len(state.promotions):
            raise RuntimeError(
                f"{task.key} was planned against incumbent {task.generation}, "
                f"the study is at {len(state.promotions)}"
            )
        if task.kind == "screen":
            return self._screen(task, state)
        if task.kind == "burst":
            return self._burst(task, state)
        return self._validate(task, state)

    def _burst(self, task: Task, state: RunState) -> tuple[TaskResult, float]:
        assert state.incumbent is not None and state.incumbent_repeats is not None
        assert task.stopped is not None
        self.progress.phase("burst", "the winner: a burst past its operating rate, then back")
        checked = check_burst(
            self.study, self.steps.bench, state.incumbent, state.incumbent_repeats, task.stopped
        )
        self.progress.status(checked.summary())
        return TaskResult(burst=checked, worker=self.name), checked.recovery_s or 0.0

    def _baseline(self) -> tuple[TaskResult, float]:
        try:
            baseline = self.steps.baseline()
        except TrialFailedError as exc:
            return TaskResult(failure=str(exc), worker=self.name), 0.0
        value = rules(self.study.objective).value(baseline.repeats) or 0.0
        self.progress.status(f"baseline: {baseline.diagnosis.headline()}; {value:.2f}")
        return TaskResult(baseline=baseline, worker=self.name), value

    def _screen(self, task: Task, state: RunState) -> tuple[TaskResult, float]:
        assert task.proposal is not None and state.incumbent_repeats is not None
        self.progress.phase("screen", f"trial {task.trial}: {task.proposal.reason}")
        steps, n = self.steps, task.trial
        screened = steps.preflight(n, task.proposal) or steps.screen(
            n, task.proposal, state.incumbent_knee_rps, state.incumbent_repeats
        )
        self.progress.status(f"trial {n}: {screened.reason}")
        return TaskResult(screened=screened, worker=self.name), screened.outcome.objective or 0.0

    def _validate(self, task: Task, state: RunState) -> tuple[TaskResult, float]:
        trial, steps = state.trials[task.trial], self.steps
        assert state.incumbent is not None and trial.screened is not None
        config, n = trial.proposal.config, task.trial
        quality = None
        if task.quality_check:
            self.progress.phase("quality", f"trial {n}: greedy outputs vs the incumbent")
            quality = steps.quality(n, state.incumbent, config)
            if quality.rejects:
                return TaskResult(quality=quality, worker=self.name), 0.0
        self.progress.phase("validate", f"trial {n}: interleaved with the incumbent")
        against = (state.incumbent, state.incumbent_knee_rps)
        known = state.incumbent_repeats.points if state.incumbent_repeats is not None else ()
        validated = steps.validate(n, against, trial.screened, config, known)
        promoted = steps.promote(n, config, validated) if validated.promote else None
        if promoted is not None:
            self.progress.status(
                f"promoted trial {n}: {promoted.objective:.2f}; now {promoted.diagnosis.headline()}"
            )
        challenger = validated.challenger
        value = (rules(self.study.objective).value(challenger) if challenger else None) or 0.0
        result = TaskResult(
            quality=quality, validated=validated, promoted=promoted, worker=self.name
        )
        return result, value
