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
from kneepoint.config import study_gpu_mismatch
from kneepoint.measure import Bench, Progress
from kneepoint.policies.search import LongShots, Proposer
from kneepoint.probes.runtime import raise_pending
from kneepoint.probes.server import reap_orphans
from kneepoint.probes.telemetry import describe_host
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Event,
    KnobCatalogue,
    Promote,
    Promoted,
    RunInterruptedError,
    RunStarted,
    Screen,
    StudySpec,
    Validate,
)
from kneepoint.run import RunFolder, RunState, TrialState, study_digest
from kneepoint.tune.decide import (
    Action,
    Done,
    MeasureBaseline,
    Propose,
    Start,
    Stop,
    next_action,
)
from kneepoint.tune.execute import Executor, proposed
from kneepoint.tune.proposers import history, run_proposer
from kneepoint.tune.standing import standing
from kneepoint.tune.steps import Steps

log = structlog.get_logger(__name__)
Now = Callable[[], datetime]


def local_now() -> datetime:
    return datetime.now().astimezone()


def run_started(study: StudySpec, progress: Progress, now: datetime) -> RunStarted:
    """The run's first event: the study, this version and the host; a study whose GPU is not
    the host's is said as a warning (the run goes on: a simulated GPU may be meant)."""
    host = describe_host()
    if (mismatch := study_gpu_mismatch(study, host)) is not None:
        log.warning("run.gpu_mismatch", detail=mismatch)
        progress.status(f"warning: {mismatch}")
    return RunStarted(
        study_name=study.name,
        seed=study.seed,
        kneepoint_version=__version__,
        started_at=now,
        study_sha256=study_digest(study),
        host=host,
    )


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
        self.steps = Steps(study, folder, Bench(study, progress), catalogue, vllm_version)
        self.executor = Executor(study, self.steps, progress)
        self._proposer: Proposer | None = None
        self._built_for, self._told = -1, 0
        self._long_shots_said = False
        self._trial_wall_s: list[float] = []  # this session's trials, for the time left
        self._trial_started = time.monotonic()

    def run(self) -> RunState:
        """Take actions until the run is finished; returns the final state. An interrupt is
        said as a phase, with how to resume, and ends the run as ``RunInterruptedError``:
        the console (a terminal's bar ended first, or a pipe's plain line) and events.jsonl
        then say it once each (a print beside it said it twice on a pipe)."""
        try:
            return self._run()
        except KeyboardInterrupt as exc:
            self.progress.phase("interrupted", f"resume with: kneepoint tune {self.folder.path}")
            raise RunInterruptedError(str(exc) or "interrupted") from exc

    def _run(self) -> RunState:
        if reaped := reap_orphans(self.folder.path):
            log.warning("run.reaped_orphan_servers", pids=reaped)
        while not isinstance(action := next_action(self.state, self.study, self.now()), Done):
            raise_pending()  # a Ctrl-C a finalizer swallowed mid-step
            self._do(action)
        if self.state.incumbent is not None and self.state.incumbent_objective:
            # nothing met the SLO: the start is no winner, and best-command.txt would say so
            self.folder.write_best(self.study, self.state.incumbent)
        return self.state

    def _do(self, action: Action) -> None:
        match action:
            case Start():
                self._record(run_started(self.study, self.progress, self.now()))
            case Stop(finished):
                self._record(finished)
            case Propose(n):
                self._propose(n)
            case MeasureBaseline() | CheckBurst():
                self._record(self.executor.event(action, self.state))
            case Screen() | CheckQuality() | Validate() | Promote():
                event = self.executor.event(action, self.state)
                self._record(event)
                if isinstance(event, Promoted):
                    self.folder.write_best(self.study, event.config)
                self._after(self.state.trials[action.trial])
            case Done():
                pass
            case _:
                assert_never(action)

    def _record(self, event: Event) -> None:
        self.folder.ledger.append(event)
        self.state.apply(event)

    def _propose(self, n: int) -> None:
        proposals = self._current_proposer().batch(n)
        if any(p.proposer == LongShots.name for p in proposals) and not self._long_shots_said:
            self.progress.phase("long shots", self._long_shots_words())
            self._long_shots_said = True
        trials = proposed(proposals, self.state, self.steps.catalogue, self.study.tuning.stop)
        for event in trials if isinstance(trials, list) else [trials]:
            self._record(event)
        self._trial_started = time.monotonic()

    def _after(self, trial: TrialState) -> None:
        """Report a finished trial and tell the live proposer what finished trials gave."""
        if trial.next_step() is not None:
            return
        self._trial_wall_s.append(time.monotonic() - self._trial_started)
        self.progress.outcome(
            standing(self.state, self.study, trial, self._trial_wall_s, self.now())
        )
        if self._proposer is None:
            return
        finished = history(self.state)
        for proposal, outcome in finished[self._told :]:
            self._proposer.tell(proposal, outcome)
        self._told = len(finished)

    def _current_proposer(self) -> Proposer:
        space_index = len(self.state.promotions)
        if self._proposer is None or self._built_for != space_index:
            self._proposer = run_proposer(self.study, self.state, self.folder.optuna_url)
            self._built_for, self._told = space_index, len(history(self.state))
            self._long_shots_said = False
        return self._proposer

    def _long_shots_words(self) -> str:
        assert self.state.pruning is not None
        names = ", ".join(c.knob.name for c in self.state.pruning.long_shots)
        tried = "every candidate has been tried"
        spent = tried if self.state.pruning.candidates else "every knob is ruled out"
        return (
            f"{spent}, and budget is left (tuning.stop: budget): one step "
            f"each way of each knob the rules ruled out ({names}), until "
            f"{self.study.tuning.patience} trials in a row promote nothing"
        )
