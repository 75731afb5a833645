"""The tuning loop: baseline, then propose / preflight / screen / check / validate / judge /
promote until the budget, the deadline or the candidates worth a trial run out.

``next_action`` (``kneepoint.tune.decide``) reads the run's state, rebuilt from the ledger, and
names the one thing to do next; the ``Tuner`` does it and records its event before the next
decision, so a run killed at any moment resumes at the action without its event: nothing
decided is lost, nothing finished is repeated. Proposers are rebuilt from the state's history
whenever the incumbent (and so the search space) changes, and on resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import assert_never

import structlog

from kneepoint import __version__
from kneepoint.load.objective import rules
from kneepoint.policies.proposer import Proposer
from kneepoint.probes.process import reap_orphans
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Event, Finished, Proposed, RunStarted
from kneepoint.records.study import StudySpec
from kneepoint.run.folder import RunFolder, study_digest
from kneepoint.run.progress import Progress
from kneepoint.run.state import RunState, TrialState
from kneepoint.tune.bench import Bench
from kneepoint.tune.burst_step import check_burst
from kneepoint.tune.decide import (
    Action,
    CheckBurst,
    CheckQuality,
    Done,
    MeasureBaseline,
    Promote,
    Propose,
    Screen,
    Start,
    Stop,
    TrialAction,
    Validate,
    next_action,
)
from kneepoint.tune.proposers import run_proposer
from kneepoint.tune.standing import baseline_words, standing
from kneepoint.tune.steps import Steps
from kneepoint.tune.trial_failure import TrialFailedError

log = structlog.get_logger(__name__)
Now = Callable[[], datetime]


def local_now() -> datetime:
    return datetime.now().astimezone()


class Tuner:
    def __init__(
        self,
        folder: RunFolder,
        study: StudySpec,
        progress: Progress,
        catalogue: KnobCatalogue,
        *,
        now: Now = local_now,
        vllm_version: str | None = None,
    ) -> None:
        self.folder, self.study, self.progress, self.now = folder, study, progress, now
        self.state = RunState.replay(folder.ledger.recover(), study.objective)
        self.steps = Steps(study, Bench(study, folder, progress), catalogue, vllm_version)
        self._proposer: Proposer | None = None
        self._built_for, self._told = -1, 0
        self._trial_wall_s: list[float] = []  # this session's trials, for the time left
        self._trial_started = time.monotonic()

    def run(self) -> RunState:
        """Take actions until the run is finished; returns the final state."""
        if reaped := reap_orphans(self.folder.path):
            log.warning("run.reaped_orphan_servers", pids=reaped)
        while not isinstance(action := next_action(self.state, self.study, self.now()), Done):
            self._do(action)
        if self.state.incumbent is not None:
            self.folder.write_best(self.study, self.state.incumbent)
        return self.state

    def _do(self, action: Action) -> None:
        match action:
            case Start():
                self._record(
                    RunStarted(
                        study_name=self.study.name,
                        seed=self.study.seed,
                        kneepoint_version=__version__,
                        started_at=self.now(),
                        study_sha256=study_digest(self.study),
                    )
                )
            case MeasureBaseline():
                self._baseline()
            case Stop(finished):
                self._record(finished)
            case Propose():
                self._propose()
            case Screen() | CheckQuality() | Validate() | Promote():
                self._record(self._trial_step(action))
                self._after(action.trial)
            case CheckBurst():
                self._burst()
            case Done():
                pass
            case _:
                assert_never(action)

    def _burst(self) -> None:
        state = self.state
        assert state.incumbent is not None and state.incumbent_repeats is not None
        assert state.finished is not None
        self.progress.phase("burst", "the winner: a burst past its operating rate, then back")
        checked = check_burst(
            self.study, self.steps.bench, state.incumbent, state.incumbent_repeats, state.finished
        )
        self._record(checked)
        self.progress.status(checked.summary())

    def _record(self, event: Event) -> None:
        self.folder.ledger.append(event)
        self.state.apply(event)

    def _baseline(self) -> None:
        try:
            baseline = self.steps.baseline()
        except TrialFailedError as exc:
            self._record(Finished(reason="baseline_failed", detail=str(exc)))
            return
        self._record(baseline)
        self.progress.status(baseline_words(baseline, self.study))

    def _propose(self) -> None:
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

    def _trial_step(self, action: TrialAction) -> Event:
        """The event of one step of a trial: screen, quality check, validation, promotion."""
        state, steps, trial = self.state, self.steps, action.trial
        n, proposal = trial.trial, trial.proposal
        assert state.incumbent is not None and state.incumbent_repeats is not None
        incumbent, repeats = state.incumbent, state.incumbent_repeats
        knee = state.incumbent_knee_rps
        match action:
            case Screen():
                return steps.preflight(n, proposal) or steps.screen(n, proposal, knee, repeats)
            case CheckQuality():
                self.progress.phase("quality", f"trial {n}: greedy outputs vs the incumbent")
                return steps.quality(n, incumbent, proposal.config)
            case Validate():
                assert trial.screened is not None
                self.progress.phase("validate", f"trial {n}: interleaved with the incumbent")
                return steps.validate(
                    n, (incumbent, knee), trial.screened, proposal.config, repeats.points
                )
            case Promote():
                assert trial.validated is not None
                promoted = steps.promote(n, proposal.config, trial.validated)
                self.folder.write_best(self.study, promoted.config)
                self.progress.status(
                    f"promoted trial {n}: {promoted.objective:.2f} "
                    f"{rules(self.study.objective).unit()}; "
                    f"now {promoted.diagnosis.headline()}"
                )
                return promoted
            case _:
                assert_never(action)

    def _after(self, trial: TrialState) -> None:
        """Report a finished trial and tell the live proposer what finished trials gave."""
        if trial.next_step() is not None:
            return
        self._trial_wall_s.append(time.monotonic() - self._trial_started)
        self.progress.status(
            standing(self.state, self.study, trial, self._trial_wall_s, self.now())
        )
        if self._proposer is None:
            return
        history = self.state.history()
        for proposal, outcome in history[self._told :]:
            self._proposer.tell(proposal, outcome)
        self._told = len(history)

    def _current_proposer(self) -> Proposer:
        space_index = len(self.state.promotions)
        if self._proposer is None or self._built_for != space_index:
            self._proposer = run_proposer(self.study, self.state, self.folder.optuna_url)
            self._built_for, self._told = space_index, len(self.state.history())
        return self._proposer
