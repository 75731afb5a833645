"""The tuning loop: baseline, then propose / preflight / screen / check / validate / judge /
promote until the budget, the deadline or the candidates run out.

Every step reads the run's state (rebuilt from the ledger), does its one thing and records the
event before the next step starts, so a run killed at any moment resumes at the step without
its event: nothing decided is lost, nothing finished is repeated. Proposers are rebuilt from
the state's history whenever the incumbent (and so the search space) changes, and on resume.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import datetime

import structlog

from kneepoint import __version__
from kneepoint.agent.bench import Bench, TrialFailedError
from kneepoint.agent.progress import Progress, duration
from kneepoint.agent.run_folder import RunFolder
from kneepoint.agent.state import RunState, TrialState
from kneepoint.agent.steps import Steps, noise_rel
from kneepoint.policies.coordinate import CoordinateDescent
from kneepoint.policies.learning import best_left, learned_factors, nothing_worth_trying
from kneepoint.policies.optuna_search import OptunaProposer
from kneepoint.policies.phased import Phased
from kneepoint.policies.proposer import Proposer, replay
from kneepoint.policies.pruning import search_space
from kneepoint.probes.process import reap_orphans
from kneepoint.records.diagnosis import Observation
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Event, Finished, Proposed, RunStarted
from kneepoint.records.study import StudySpec

log = structlog.get_logger(__name__)
Now = Callable[[], datetime]


def _local_now() -> datetime:
    return datetime.now().astimezone()


class Tuner:
    def __init__(
        self, folder: RunFolder, study: StudySpec, progress: Progress, catalogue: KnobCatalogue,
        *, now: Now = _local_now, vllm_version: str | None = None,
    ) -> None:  # fmt: skip
        self.folder, self.study, self.progress, self.now = folder, study, progress, now
        self.state = RunState.replay(folder.ledger.recover())
        self.steps = Steps(study, Bench(study, folder, progress), catalogue, vllm_version)
        self._proposer: Proposer | None = None
        self._built_for = -1
        self._told = 0
        self._trial_wall_s: list[float] = []  # this session's trials, for the time left
        self._trial_started = time.monotonic()

    def run(self) -> RunState:
        """Take steps until the run is finished; returns the final state."""
        reaped = reap_orphans(self.folder.path)
        if reaped:
            log.warning("run.reaped_orphan_servers", pids=reaped)
        while True:
            step, trial = self.state.next_step()
            if step == "done":
                break
            if step in ("start", "baseline", "propose"):
                getattr(self, f"_{step}")()
            else:
                assert trial is not None
                getattr(self, f"_{step}")(trial)
        if self.state.incumbent is not None:
            self.folder.write_best(self.study, self.state.incumbent)
        return self.state

    def _record(self, event: Event) -> None:
        self.folder.ledger.append(event)
        self.state.apply(event)

    def _start(self) -> None:
        self._record(RunStarted(study_name=self.study.name, seed=self.study.seed,
                                kneepoint_version=__version__, started_at=self.now()))  # fmt: skip

    def _baseline(self) -> None:
        try:
            baseline = self.steps.baseline()
        except TrialFailedError as exc:
            self._record(Finished(reason="baseline_failed", detail=str(exc)))
            return
        self._record(baseline)
        self.progress.status(f"baseline: {baseline.diagnosis.headline()}; capacity "
                             f"{baseline.repeats.capacity_rps or 0:.2f} req/s")  # fmt: skip

    def _propose(self) -> None:
        stop = self._budget_stop()
        if stop is not None:
            self._record(stop)
            return
        assert self.state.pruning is not None and self.state.diagnosis is not None
        if not self.state.pruning.candidates:
            detail = (f"{self.state.diagnosis.headline()}: every knob is ruled out, so nothing "
                      "kneepoint can change would help")  # fmt: skip
            self._record(Finished(reason="nothing_to_try", detail=detail))
            return
        worthless = self._nothing_worth_trying()
        if worthless is not None:
            self._record(Finished(reason="nothing_worth_trying", detail=worthless))
            return
        proposal = self._current_proposer().ask()
        if proposal is None:
            self._record(Finished(reason="exhausted", detail="every candidate has been tried"))
            return
        changed = [self.steps.catalogue.get(name) for name in proposal.changes]
        quality = any(knob is not None and knob.changes_outputs for knob in changed)
        number = self.state.next_trial_number()
        self._record(Proposed(trial=number, proposal=proposal, quality_check=quality))
        self._trial_started = time.monotonic()
        self.progress.phase("screen", f"trial {number}: {proposal.reason}")

    def _screen(self, trial: TrialState) -> None:
        assert self.state.incumbent_repeats is not None
        incumbent = self.state.incumbent_repeats
        event = self.steps.preflight(trial.trial, trial.proposal) or self.steps.screen(
            trial.trial, trial.proposal, incumbent.capacity_rps or 0.0, incumbent
        )
        self._record(event)
        self._after(trial)

    def _quality(self, trial: TrialState) -> None:
        assert self.state.incumbent is not None
        self.progress.phase("quality", f"trial {trial.trial}: greedy outputs vs the incumbent")
        self._record(self.steps.quality(trial.trial, self.state.incumbent, trial.proposal.config))
        self._after(trial)

    def _validate(self, trial: TrialState) -> None:
        assert self.state.incumbent is not None and self.state.incumbent_repeats is not None
        assert trial.screened is not None
        self.progress.phase("validate", f"trial {trial.trial}: interleaved with the incumbent")
        event = self.steps.validate(trial.trial, self.state.incumbent,
                                    self.state.incumbent_repeats, trial.screened,
                                    trial.proposal.config)  # fmt: skip
        self._record(event)
        self._after(trial)

    def _promote(self, trial: TrialState) -> None:
        assert trial.validated is not None
        event = self.steps.promote(trial.trial, trial.proposal.config, trial.validated)
        self._record(event)
        self.folder.write_best(self.study, event.config)
        self.progress.status(f"promoted trial {trial.trial}: {event.objective:.2f} req/s; "
                             f"now {event.diagnosis.headline()}")  # fmt: skip
        self._after(trial)

    def _after(self, trial: TrialState) -> None:
        """Report a finished trial and tell the live proposer what finished trials gave."""
        if trial.next_step() is not None:
            return
        self._trial_wall_s.append(time.monotonic() - self._trial_started)
        self.progress.status(self._standing(trial))
        if self._proposer is None:
            return
        history = self.state.history()
        for proposal, outcome in history[self._told :]:
            self._proposer.tell(proposal, outcome)
        self._told = len(history)

    def _nothing_worth_trying(self) -> str | None:
        """Why no candidate left is worth a trial: each re-priced by what its knob's last move
        against this incumbent measured, none beats the incumbent's noise."""
        state = self.state
        assert state.pruning is not None and state.incumbent_repeats is not None
        since = max((p.trial for p in state.promotions), default=0)
        measured = [(t.proposal, r) for t in state.trials.values()
                    if t.trial > since and (r := t.measured_ratio()) is not None]  # fmt: skip
        floor = max(self.study.tuning.min_effect_rel, noise_rel(state.incumbent_repeats))
        best = best_left(state.pruning.candidates, learned_factors(measured))
        return nothing_worth_trying(best, floor)

    def _current_proposer(self) -> Proposer:
        space_index = len(self.state.promotions)
        if self._proposer is None or self._built_for != space_index:
            history = self.state.history()
            self._proposer = replay(self._build(space_index), history)
            self._built_for, self._told = space_index, len(history)
        return self._proposer

    def _build(self, space_index: int) -> Proposer:
        state, tuning = self.state, self.study.tuning
        assert state.incumbent is not None and state.pruning is not None
        assert state.incumbent_repeats is not None
        point = state.incumbent_repeats.points[0].point
        observation = Observation(saturated=point, gpu=self.study.gpu, model=self.study.model,
                                  engine=state.incumbent, workload=self.study.workload,
                                  efficiency=self.study.efficiency)  # fmt: skip
        space = search_space(state.pruning, observation, state.incumbent_objective)
        seed = self.study.seed

        def optuna() -> Proposer:
            return OptunaProposer(space, seed, sampler=tuning.sampler,
                                  storage=self.folder.optuna_url,
                                  study_name=f"{self.study.name}-space{space_index}")  # fmt: skip

        if tuning.proposer == "optuna":
            return optuna()
        coordinate = CoordinateDescent(space, seed, min_gain=tuning.min_effect_rel)
        return coordinate if tuning.proposer == "coordinate" else Phased(coordinate, optuna)

    def _standing(self, trial: TrialState) -> str:
        """One line: the trial's result, the incumbent and the budget left."""
        state, budget = self.state, self.study.budget
        measured, ratio = trial.measured_objective(), trial.measured_ratio()
        verdict = "promoted" if trial.promoted else "kept the incumbent"
        against = (f"predicted {trial.proposal.prediction.capacity_ratio:.2f}x, measured "
                   + (f"{ratio:.2f}x" if ratio is not None else "nothing"))  # fmt: skip
        parts = [f"trial {trial.trial}: {measured or 0:.2f} req/s ({against}), {verdict}",
                 f"incumbent {state.incumbent_objective or 0:.2f} req/s"]  # fmt: skip
        hours = state.device_s / 3600.0
        if budget.max_trials is not None:
            parts.append(f"{budget.max_trials - state.trials_run} trials left")
        used = f"{hours:.2f} device-h used"
        if budget.max_device_hours is not None:
            used += f" of {budget.max_device_hours:g}"
        if budget.price_per_gpu_hour_usd is not None:
            used += f" (${hours * budget.price_per_gpu_hour_usd:.2f})"
        return " | ".join([*parts, used, *self._time_left()])

    def _time_left(self) -> list[str]:
        """Wall time to the first limit, at this session's pace per trial (an estimate: a
        trial that goes on to validation takes several times one that stops at its screen)."""
        budget, state = self.study.budget, self.state
        pace = statistics.fmean(self._trial_wall_s) if self._trial_wall_s else None
        left: list[float] = []
        if pace is not None and budget.max_trials is not None:
            left.append(pace * max(0, budget.max_trials - state.trials_run))
        deadline = budget.deadline_after(state.started.started_at) if state.started else None
        if deadline is not None:
            left.append(max(0.0, (deadline - self.now()).total_seconds()))
        return [f"~{duration(min(left))} left"] if left else []

    def _budget_stop(self) -> Finished | None:
        budget, state = self.study.budget, self.state
        if budget.max_trials is not None and state.trials_run >= budget.max_trials:
            return Finished(reason="max_trials", detail=f"{state.trials_run} trials run")
        hours = state.device_s / 3600.0
        if budget.max_device_hours is not None and hours >= budget.max_device_hours:
            return Finished(reason="max_device_hours", detail=f"{hours:.2f} device-hours spent")
        assert state.started is not None
        deadline = budget.deadline_after(state.started.started_at)
        if deadline is not None and self.now() >= deadline:
            return Finished(reason="deadline", detail=f"deadline {deadline.isoformat()} passed")
        return None
