"""A tuning run's state, rebuilt from its ledger: the incumbent, what binds, the trials so far
(each a ``TrialState``: what it measured and its next step), the device time spent, and where
the loop stands.

The state is a pure function of the ledger's events, which is what makes resuming exact: the
loop's decisions (``kneepoint.tune.decide``) read it and nothing else. Several trials may be open
at once (a pool's round screens one per GPU); a promotion closes the finalists of its round
that were waiting for validation, superseded. ``apply`` refuses an event that cannot follow the
ones before it, so a damaged or hand-edited ledger is named, never half-read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from kneepoint.load import rules
from kneepoint.records import (
    Baseline,
    BaselinePart,
    BurstChecked,
    Diagnosis,
    EngineConfig,
    Event,
    Finished,
    KneepointError,
    Objective,
    PartMeasured,
    Placed,
    Promoted,
    Proposal,
    Proposed,
    Pruning,
    QualityChecked,
    RunStarted,
    Screened,
    SloCapacity,
    SweepResult,
    Validated,
    ValidationPart,
)

Step = Literal["screen", "quality", "validate", "promote"]
"""A trial's steps, in order; the run's own order (start, baseline, trials, stop, burst) is
``kneepoint.tune.decide``'s."""


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
    generation: int = 0
    """The incumbent it is measured beside: the promotions before it was proposed."""

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


def _stale(screened: Screened) -> Screened:
    """A screen that landed after a promotion it ran beside (several GPUs): it was measured
    against the incumbent before, so it ends its trial; the walk from the new incumbent
    decides whether to try the move again."""
    reason = (
        f"superseded: {screened.reason}; a trial running beside it was promoted while it "
        "was screened, against the incumbent before"
    )
    return screened.model_copy(update={"finalist": False, "reason": reason})


_STEP_OF: dict[type, Step] = {
    Screened: "screen",
    QualityChecked: "quality",
    Validated: "validate",
    Promoted: "promote",
}


class StateError(KneepointError, ValueError):
    """An event that cannot follow the ones before it (a damaged or hand-edited ledger)."""


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
    trial_device_s: float = 0.0
    """Device seconds the trials' own steps spent (screens, quality checks, validations)."""
    space_started: tuple[float, int, float] = (0.0, 0, 0.0)
    """(device_s, trials_run, trial_device_s) when the current incumbent's space began (its
    baseline or promotion): what a proposer built for that space is priced from, live or
    resumed alike."""
    space_first_trial: int = 1
    """The first trial proposed against the current incumbent (its round's siblings, judged
    against the one before, come before it)."""
    finished: Finished | None = None
    burst: BurstChecked | None = None
    objective: Objective = field(default_factory=SloCapacity)
    """What the run maximises: how its sweeps' values are read."""
    baseline_parts: list[BaselinePart] = field(default_factory=list)
    """The baseline's shares measured so far, before its Baseline (several GPUs)."""
    validation_parts: dict[int, list[ValidationPart]] = field(default_factory=dict)
    """Each finalist's validation shares measured so far, by trial (several GPUs)."""
    placements: list[Placed] = field(default_factory=list)

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
                generation=len(self.promotions),
            )
        elif isinstance(event, Screened | QualityChecked | Validated | Promoted):
            self._apply_trial_event(event)
        elif isinstance(event, PartMeasured):
            self._add_part(event)
        elif isinstance(event, Placed):
            self.placements.append(event)
        elif isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, BurstChecked):
            self.burst = event
        spent = getattr(event, "device_s", 0.0)
        self.device_s += spent
        if isinstance(event, Screened | QualityChecked | Validated):
            self.trial_device_s += spent
        if isinstance(event, Baseline | Promoted):
            self.space_started = (self.device_s, self.trials_run, self.trial_device_s)
            self.space_first_trial = self.next_trial_number()

    def refuses(self, event: Event) -> str | None:
        """Why ``event`` cannot come next (None: it can)."""
        return self._why_not(event)

    def _check_follows(self, event: Event) -> None:
        problem = self._why_not(event)
        if problem is not None:
            raise StateError(f"a {event.event} event where {problem}")

    def _why_not(self, event: Event) -> str | None:
        """Why the event cannot come next; None: it can."""
        if isinstance(event, RunStarted):
            return None if self.started is None else "the run had started already"
        if self.started is None:
            return "the run had not started"
        if isinstance(event, Placed):
            return None
        if isinstance(event, BurstChecked):
            return None if self.burst_due else "no burst check was due"
        if self.finished is not None:
            return "the run had finished"
        return self._why_not_search(event)

    def _why_not_search(self, event: Event) -> str | None:
        if isinstance(event, Baseline):
            return None if self.baseline is None else "the baseline was measured already"
        if isinstance(event, Finished):
            # A budget stop may leave a finalist unvalidated: its validation would have
            # ended the run past the budget (``kneepoint.tune.budget.unaffordable``).
            still = [] if event.reason == "max_device_hours" else self.open_trials()
            return None if not still else f"trial {still[0].trial} was still open"
        if isinstance(event, PartMeasured) and event.baseline is not None:
            return None if self.baseline is None else "the baseline was measured already"
        if self.baseline is None:
            return "the baseline was not measured yet"
        if isinstance(event, Proposed):
            expected = self.next_trial_number()
            return None if event.trial == expected else f"trial {expected} was next"
        return self._why_not_trial(event)

    def _why_not_trial(self, event: Event) -> str | None:
        number = getattr(event, "trial", None)
        if isinstance(event, PartMeasured) and event.validation is not None:
            number = event.validation.trial
        trial = self.trials.get(number) if isinstance(number, int) else None
        if trial is None:
            return f"no trial {number} was proposed"
        step = trial.next_step()
        if step is None:
            return f"trial {number} had ended"
        if (
            _STEP_OF.get(type(event), "validate" if isinstance(event, PartMeasured) else None)
            != step
        ):
            return f"trial {number} was at its {step} step"
        return None

    def _apply_trial_event(self, event: Screened | QualityChecked | Validated | Promoted) -> None:
        trial = self.trials[event.trial]
        if isinstance(event, Screened):
            trial.screened = event if trial.generation == len(self.promotions) else _stale(event)
        elif isinstance(event, QualityChecked):
            trial.quality = event
        elif isinstance(event, Validated):
            trial.validated = event
        else:
            trial.promoted = event
            self.promotions.append(event)
            self._set_incumbent(event.config, event.repeats, event.diagnosis, event.pruning)
            self._supersede(event.trial)

    def _supersede(self, promoted: int) -> None:
        """Close the finalists still waiting for validation when a sibling of their round
        was promoted: they were screened against an incumbent that is gone, and the walk from
        the new one decides whether they are tried again."""
        for trial in self.open_trials():
            screened = trial.screened
            if trial.trial == promoted or screened is None:
                continue
            reason = (
                f"superseded: {screened.reason}; a sibling of its round was promoted "
                "first, and it was screened against the incumbent before"
            )
            trial.screened = screened.model_copy(update={"finalist": False, "reason": reason})

    def _add_part(self, event: PartMeasured) -> None:
        if event.baseline is not None:
            self.baseline_parts.append(event.baseline)
        elif event.validation is not None:
            self.validation_parts.setdefault(event.validation.trial, []).append(event.validation)

    def _set_incumbent(
        self, config: EngineConfig, repeats: SweepResult, diagnosis: Diagnosis, pruning: Pruning
    ) -> None:
        self.incumbent, self.incumbent_repeats = config, repeats
        self.incumbent_objective = rules(self.objective).value(repeats)
        self.diagnosis, self.pruning = diagnosis, pruning

    @property
    def incumbent_by_repeat(self) -> tuple[float, ...]:
        """The incumbent's objective over its own repeats (the validation's early look reads
        its known noise from them)."""
        repeats = self.incumbent_repeats
        return () if repeats is None else rules(self.objective).by_repeat(repeats)

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

    def open_trials(self) -> list[TrialState]:
        """The trials with a step left, by number."""
        return [self.trials[n] for n in sorted(self.trials) if self.trials[n].next_step()]

    def measured_moves(self, before: int | None = None) -> list[tuple[Proposal, float]]:
        """Every trial's proposal (numbered below ``before``, if given) with its measured
        ratio to the incumbent it was judged against, in order, across promotions (what
        ``learned_factors`` reads)."""
        return [
            (self.trials[n].proposal, r)
            for n in sorted(self.trials)
            if (before is None or n < before) and (r := self.trials[n].measured_ratio()) is not None
        ]

    @property
    def burst_due(self) -> bool:
        """The winner's burst check is owed: the search stopped in a way a check follows
        (``Finished.burst_follows``) and none is recorded."""
        return self.finished is not None and self.finished.burst_follows and self.burst is None

    @property
    def trials_run(self) -> int:
        """Trials that spent their screening (what max_trials counts)."""
        return sum(t.screened is not None for t in self.trials.values())

    def next_trial_number(self) -> int:
        return max(self.trials, default=0) + 1
