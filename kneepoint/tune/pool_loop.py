"""A tuning run over several GPU sets: the driver keeps the ledger and the decisions
(``kneepoint.tune.dispatch``), a pool (Ray, or the virtual clock) runs the measuring steps on
its slots, each slot one server's GPUs, and each landed step's events are written before the
next decision. A driver killed at any moment resumes from its ledger; steps that were out are
dispatched again, nothing landed is measured twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from kneepoint.measure import Bench, Progress
from kneepoint.probes.server import reap_orphans
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Event,
    Finished,
    JoinBaseline,
    KnobCatalogue,
    Landed,
    MeasureRepeats,
    Outcome,
    PartMeasured,
    Placed,
    Promote,
    Promoted,
    RunInterruptedError,
    Screen,
    Screened,
    SearchKnee,
    StudySpec,
    Validate,
    Validated,
)
from kneepoint.run import RunFolder, RunState
from kneepoint.tune.burst_step import burst_skipped, unmeasured
from kneepoint.tune.decide import Done, Propose, Start, Stop
from kneepoint.tune.dispatch import Dispatched, GpuStep, Pooled, Write, dispatch
from kneepoint.tune.execute import Executor, proposed
from kneepoint.tune.gpu_step import StepJob
from kneepoint.tune.loop import Now, local_now, run_started
from kneepoint.tune.proposers import run_proposer
from kneepoint.tune.standing import baseline_words
from kneepoint.tune.steps import Steps

log = structlog.get_logger(__name__)

ATTEMPTS = 3
"""Tries at a step whose node dies under it before the run records it as crashed."""


def device_s(events: Sequence[Event]) -> float:
    """The device time (server-seconds) a step's events carry, its shares' included."""
    total = 0.0
    for event in events:
        if isinstance(event, PartMeasured):
            share = event.baseline or event.validation
            total += share.device_s if share is not None else 0.0
        else:
            total += getattr(event, "device_s", 0.0)
    return total


class Pool(Protocol):
    """Slots of GPUs that run steps: ``kneepoint.probes.cluster``'s Ray pool, or the virtual
    clock's (``kneepoint.tune.virtual_pool``)."""

    def free(self) -> int:
        """GPUs free now."""
        ...

    def submit(self, key: str, job: Callable[[Sequence[str]], list[Event]], gpus: int) -> None:
        """Run ``job`` on ``gpus`` GPUs of one node (it is given their ids) once they are
        free."""
        ...

    def wait(self) -> Landed:
        """The next step to come back (blocks)."""
        ...

    def cancel(self) -> None:
        """Cancel every step out and stop their servers."""
        ...


class PoolTuner:
    def __init__(
        self,
        folder: RunFolder,
        study: StudySpec,
        progress: Progress,
        catalogue: KnobCatalogue,
        pool: Pool,
        *,
        now: Now = local_now,
        vllm_version: str | None = None,
    ) -> None:
        self.folder, self.study, self.progress, self.now = folder, study, progress, now
        self.catalogue, self.pool, self.vllm_version = catalogue, pool, vllm_version
        self.events: list[Event] = list(folder.ledger.recover())
        self.state = RunState.replay(self.events, study.objective)
        steps = Steps(study, folder, Bench(study, progress), catalogue, vllm_version)
        self.local = Executor(study, steps, progress)
        self.out: dict[str, GpuStep] = {}
        self.attempts: dict[str, int] = {}
        self.dry_at = -1
        """The ledger's length when the proposer last had nothing new."""

    def run(self) -> RunState:
        """Dispatch, measure and record until the run has finished; its final state."""
        try:
            self._run()
        except KeyboardInterrupt as exc:
            self.pool.cancel()
            self.progress.phase("interrupted", f"resume with: kneepoint tune {self.folder.path}")
            raise RunInterruptedError(str(exc) or "interrupted") from exc
        if self.state.incumbent is not None and self.state.incumbent_objective:
            self.folder.write_best(self.study, self.state.incumbent)
        return self.state

    def _run(self) -> None:
        if reaped := reap_orphans(self.folder.path):
            log.warning("run.reaped_orphan_servers", pids=reaped)
        while True:
            slots = self.pool.free() // (self.state.incumbent or self.study.engine).gpu_count
            dry = self.dry_at == len(self.events)
            pooled = Pooled(tuple(self.out.values()), slots, dry)
            todo = dispatch(self.state, self.study, self.now(), pooled)
            if any(isinstance(a, Done) for a in todo):
                return
            local = [a for a in todo if not isinstance(a, GpuStep)]
            gpu_steps = [a for a in todo if isinstance(a, GpuStep)]
            skipped = [step for step in gpu_steps if self._skipped(step)]
            for step in gpu_steps:
                if step not in skipped:
                    self._submit(step)
            if skipped:
                continue  # recorded without a GPU: dispatch again
            if local and (self._do(local[0]) or isinstance(local[0], Propose)):
                continue  # a proposer with nothing new is not asked again at this state
            if self.out:
                self._land(self.pool.wait())
            else:
                raise AssertionError(f"nothing out and nothing to do: {todo}")

    def _skipped(self, step: GpuStep) -> bool:
        """Record a burst check that would measure nothing, with why, without placing it."""
        state = self.state
        if not isinstance(step, CheckBurst) or state.finished is None:
            return False
        assert state.incumbent is not None and state.incumbent_repeats is not None
        why = burst_skipped(self.study, state.incumbent_repeats, state.finished)
        if why:
            checked = unmeasured(self.study, state.incumbent, skipped=why)
            self.progress.outcome(checked.summary())
            self._record(checked)
        return bool(why)

    def _submit(self, step: GpuStep) -> None:
        job = StepJob(
            self.study,
            self.folder.path,
            self.catalogue,
            self.vllm_version,
            step,
            tuple(self.events),
        )
        self.out[step.key] = step
        self.attempts[step.key] = self.attempts.get(step.key, 0) + 1
        self.pool.submit(step.key, job, self._gpus(step))
        log.info("pool.submitted", step=step.key, attempt=self.attempts[step.key])

    def _gpus(self, step: GpuStep) -> int:
        """The GPUs ``step``'s servers need: the widest configuration it serves (a
        validation runs the incumbent and the challenger in turn on one GPU set)."""
        incumbent = self.state.incumbent or self.study.engine
        trial = self.state.trials.get(step.trial)
        if trial is None:
            return incumbent.gpu_count
        if isinstance(step, Screen):
            return trial.proposal.config.gpu_count
        return max(incumbent.gpu_count, trial.proposal.config.gpu_count)

    def _land(self, landed: Landed) -> None:
        """Record a step that came back; one lost with its node is run again (its attempt
        and the device time it held written), at most ``ATTEMPTS`` times. A share whose
        trial was judged while it ran (a next phase measured in case) is kept as device time
        only."""
        step = self.out.pop(landed.key)
        attempt = self.attempts[landed.key]
        closed = next((why for e in landed.events if (why := self.state.refuses(e))), None)
        lost = landed.lost or (f"not needed: {closed}" if closed else None)
        spent = landed.held_s if landed.lost is not None else device_s(landed.events)
        placed = Placed(
            step=landed.key,
            node=landed.node,
            gpu_ids=landed.gpu_ids,
            attempt=attempt,
            lost=lost,
            device_s=spent if lost is not None else 0.0,
        )
        self._record(placed)
        if landed.lost is not None:
            log.warning("pool.lost", step=landed.key, attempt=attempt, why=landed.lost)
            if attempt < ATTEMPTS:
                self._submit(step)
            else:
                self._give_up(step, landed.lost)
            return
        for event in landed.events if closed is None else ():
            self._record(event)
            if isinstance(event, Screened):
                self.progress.outcome(f"trial {event.trial}: {event.reason}")

    def _give_up(self, step: GpuStep, why: str) -> None:
        """Record a step lost ``ATTEMPTS`` times as its failure: the trial crashed, the
        baseline failed (the steps beside it are cancelled: no run follows), the burst check
        not run."""
        detail = f"lost with its node {ATTEMPTS} times ({why})"
        crashed = Outcome(status="crashed", detail=detail)
        log.error("pool.given_up", step=step.key, why=why)
        match step:
            case Screen():
                self._record(Screened(trial=step.trial, outcome=crashed, reason=detail))
            case CheckQuality() | Validate():
                failure = crashed.model_copy(update={"detail": f"during validation: {detail}"})
                self._record(Validated(trial=step.trial, failure=failure))
            case CheckBurst():
                incumbent = self.state.incumbent or self.study.engine
                self._record(unmeasured(self.study, incumbent, skipped=detail))
            case SearchKnee() | MeasureRepeats():
                self.pool.cancel()
                self.out.clear()
                self._record(Finished(reason="baseline_failed", detail=f"the baseline {detail}"))

    def _do(self, action: Dispatched) -> bool:
        """The driver's own steps (no GPU); False: it recorded nothing (no new proposal)."""
        match action:
            case JoinBaseline():
                knee = next(p for p in self.state.baseline_parts if p.repeats == 0)
                parts = [p for p in self.state.baseline_parts if p.repeats > 0]
                baseline = self.local.steps.baseline_of(knee, parts)
                self.progress.outcome(baseline_words(baseline, self.study))
                self._record(baseline)
            case Promote():
                event = self.local.event(action, self.state)
                self._record(event)
                assert isinstance(event, Promoted)
                self.folder.write_best(self.study, event.config)
            case Write(event):
                self._record(event)
            case Start():
                self._record(run_started(self.study, self.progress, self.now()))
            case Stop(finished):
                self._record(finished)
            case Propose(n):
                return self._propose(n)
            case _:
                raise AssertionError(f"not a driver step: {action}")
        return True

    def _propose(self, n: int) -> bool:
        """``n`` proposals not already open (the walk's next step may be out)."""
        open_keys = {t.proposal.key() for t in self.state.open_trials()}
        asked = run_proposer(self.study, self.state, None).batch(n + len(open_keys))
        fresh = [p for p in asked if p.key() not in open_keys][:n]
        if not fresh and (self.out or self.state.open_trials()):
            self.dry_at = len(self.events)
            return False  # nothing new until an open trial lands
        trials = proposed(fresh, self.state, self.catalogue, self.study.tuning.stop)
        for event in trials if isinstance(trials, list) else [trials]:
            self._record(event)
        return True

    def _record(self, event: Event) -> None:
        self.folder.ledger.append(event)
        self.state.apply(event)
        self.events.append(event)
        if isinstance(event, Finished):
            self.progress.outcome(f"finished: {event.detail}")
