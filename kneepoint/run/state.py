"""A tuning run's state, rebuilt from its ledger: the incumbent, what binds, the trials so far,
the device time spent, and where the loop stands.

The state is a pure function of the ledger's events, which is what makes resuming exact: the
loop asks it for the next step (``next_step``) and the answer depends on nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from kneepoint.load.objective import rules
from kneepoint.records.diagnosis import Diagnosis
from kneepoint.records.engine import EngineConfig
from kneepoint.records.ledger import (
    Baseline,
    BurstChecked,
    Event,
    Finished,
    Promoted,
    Proposed,
    QualityChecked,
    RunStarted,
    Screened,
    Validated,
)
from kneepoint.records.objective import Objective, SloCapacity
from kneepoint.records.proposal import Outcome, Proposal, Pruning
from kneepoint.records.sweep import SweepResult

Step = Literal[
    "start", "baseline", "propose", "screen", "quality", "validate", "promote", "burst", "done"
]
_RECORDS: dict[Step, tuple[type, ...]] = {
    "start": (RunStarted,),
    "baseline": (Baseline, Finished),
    "propose": (Proposed, Finished),
    "screen": (Screened,),
    "quality": (QualityChecked,),
    "validate": (Validated,),
    "promote": (Promoted,),
    "burst": (BurstChecked,),
    "done": (),
}
"""The events each step records: a ledger is the loop's steps, in the loop's order."""


class StateError(ValueError):
    """An event that cannot follow the ones before it (a damaged or hand-edited ledger)."""


@dataclass
class TrialState:
    """One trial's events so far."""

    trial: int
    proposal: Proposal
    quality_check: bool = False
    against: float | None = None
    """The incumbent's objective when the trial was proposed (what its prediction is against)."""
    screened: Screened | None = None
    quality: QualityChecked | None = None
    validated: Validated | None = None
    promoted: Promoted | None = None
    objective: Objective = field(default_factory=SloCapacity)

    def measured_objective(self) -> float | None:
        """The objective as measured: validated where it was validated, else screened."""
        challenger = self.validated.challenger if self.validated is not None else None
        measured = None if challenger is None else rules(self.objective).value(challenger)
        if measured is not None:
            return measured
        return self.screened.outcome.objective if self.screened is not None else None

    def measured_ratio(self) -> float | None:
        """The measured objective over the incumbent's, as the prediction was made."""
        measured = self.measured_objective()
        return measured / self.against if measured is not None and self.against else None

    def outcome(self) -> Outcome | None:
        """What the proposers are told. A validated trial reports its validated objective, but
        one the judge did not promote is told as no better than the incumbent it was judged
        against: its gain was not shown beyond the noise, and the search must not build on it
        (the search moves its centre by promotions)."""
        if self.screened is None:
            return None
        outcome, validated = self.screened.outcome, self.validated
        if validated is not None and validated.failure is not None:
            return validated.failure
        if validated is None or validated.challenger is None or validated.incumbent is None:
            return outcome
        objective = rules(self.objective).value(validated.challenger)
        if objective is None:
            return outcome
        incumbent = rules(self.objective).value(validated.incumbent)
        if not validated.promote and incumbent is not None:
            objective = min(objective, incumbent)
        return outcome.model_copy(update={"objective": objective})

    @property
    def unchecked_quality(self) -> bool:
        """It changes model outputs and went on without a quality check."""
        return self.quality is not None and self.quality.verdict == "skipped"

    def next_step(self) -> Step | None:
        """The step this trial still needs, or None when it is over."""
        if self.screened is None:
            return "screen"
        rejected = self.quality is not None and self.quality.rejects
        if not self.screened.finalist or rejected:
            return None
        if self.quality_check and self.quality is None:
            return "quality"
        if self.validated is None:
            return "validate"
        return "promote" if self.validated.promote and self.promoted is None else None


@dataclass
class RunState:
    started: RunStarted | None = None
    baseline: Baseline | None = None
    incumbent: EngineConfig | None = None
    incumbent_objective: float | None = None
    incumbent_repeats: SweepResult | None = None
    diagnosis: Diagnosis | None = None
    pruning: Pruning | None = None
    promotions: list[Promoted] = field(default_factory=list)
    trials: dict[int, TrialState] = field(default_factory=dict)
    device_s: float = 0.0
    finished: Finished | None = None
    burst: BurstChecked | None = None
    objective: Objective = field(default_factory=SloCapacity)
    """What the run maximises: how its sweeps' values are read."""

    @classmethod
    def replay(cls, events: Iterable[Event], objective: Objective | None = None) -> RunState:
        state = cls(objective=objective or SloCapacity())
        for event in events:
            state.apply(event)
        return state

    def apply(self, event: Event) -> None:
        self._check_follows(event)
        if isinstance(event, RunStarted):
            self.started = event
        elif isinstance(event, Baseline):
            self.baseline = event
            self._set_incumbent(event.config, event.repeats, event.diagnosis, event.pruning)
        elif isinstance(event, Proposed):
            self.trials[event.trial] = TrialState(
                event.trial,
                event.proposal,
                event.quality_check,
                self.incumbent_objective,
                objective=self.objective,
            )
        elif isinstance(event, Screened | QualityChecked | Validated | Promoted):
            self._apply_trial_event(event)
        elif isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, BurstChecked):
            self.burst = event
        self.device_s += getattr(event, "device_s", 0.0)

    def _check_follows(self, event: Event) -> None:
        step, trial = self.next_step()
        if not isinstance(event, _RECORDS[step]):
            where = f" of trial {trial.trial}" if trial is not None else ""
            raise StateError(f"a {event.event} event where the run was at its {step} step{where}")
        number = getattr(event, "trial", None)
        expected = trial.trial if trial is not None else self.next_trial_number()
        if number is not None and number != expected:
            raise StateError(
                f"a {event.event} event for trial {number} where trial {expected} was next"
            )

    def _apply_trial_event(self, event: Screened | QualityChecked | Validated | Promoted) -> None:
        trial = self.trials[event.trial]
        if isinstance(event, Screened):
            trial.screened = event
        elif isinstance(event, QualityChecked):
            trial.quality = event
        elif isinstance(event, Validated):
            trial.validated = event
        else:
            trial.promoted = event
            self.promotions.append(event)
            self._set_incumbent(event.config, event.repeats, event.diagnosis, event.pruning)

    def _set_incumbent(
        self, config: EngineConfig, repeats: SweepResult, diagnosis: Diagnosis, pruning: Pruning
    ) -> None:
        self.incumbent, self.incumbent_repeats = config, repeats
        self.incumbent_objective = rules(self.objective).value(repeats)
        self.diagnosis, self.pruning = diagnosis, pruning

    @property
    def incumbent_knee_rps(self) -> float:
        """Where the incumbent's knee lies: its repeats' SLO capacity where they saw it fail,
        else the starting configuration's knee search (goodput at a fixed rate measures that
        rate only). For peak throughput, the highest rate it completed requests at, measured
        past its knee: the rate it serves flat out, which the next sweeps must overrun."""
        repeats = self.incumbent_repeats
        if repeats is not None and self.promotions:
            served = rules(self.objective).served_rps(repeats)
            if served is not None:
                return served
        if repeats is not None and repeats.capacity_rps is not None:
            return repeats.capacity_rps
        knee = self.baseline.knee if self.baseline is not None else None
        if knee is None or not knee.points:
            return 0.0
        return knee.capacity_rps or min(p.rate_rps for p in knee.points)

    @property
    def current_trial(self) -> TrialState | None:
        """The newest trial, if it still has a step to take."""
        if not self.trials:
            return None
        newest = self.trials[max(self.trials)]
        return newest if newest.next_step() is not None else None

    def next_step(self) -> tuple[Step, TrialState | None]:
        if self.finished is not None:
            # the winner's burst check follows the search (none without a baseline)
            wants_burst = self.finished.reason != "baseline_failed" and self.burst is None
            return ("burst" if wants_burst else "done"), None
        if self.started is None:
            return "start", None
        if self.baseline is None:
            return "baseline", None
        trial = self.current_trial
        if trial is not None:
            step = trial.next_step()
            assert step is not None
            return step, trial
        return "propose", None

    def history(self) -> list[tuple[Proposal, Outcome]]:
        """Every finished trial's proposal and outcome, in order (what proposers replay)."""
        done = []
        for number in sorted(self.trials):
            trial = self.trials[number]
            outcome = trial.outcome()
            if outcome is not None and trial.next_step() is None:
                done.append((trial.proposal, outcome))
        return done

    def measured_moves(self) -> list[tuple[Proposal, float]]:
        """Every trial's proposal with its measured ratio to the incumbent it was judged
        against, in order, across promotions (what ``learned_factors`` reads)."""
        return [
            (self.trials[n].proposal, r)
            for n in sorted(self.trials)
            if (r := self.trials[n].measured_ratio()) is not None
        ]

    @property
    def trials_run(self) -> int:
        """Trials that spent their screening (what max_trials counts)."""
        return sum(t.screened is not None for t in self.trials.values())

    def next_trial_number(self) -> int:
        return max(self.trials, default=0) + 1
