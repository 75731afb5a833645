"""One trial of a tuning run, as its events so far make it (``kneepoint.run.state`` keeps the
run's trials): what it measured, what the proposers are told of it, and its next step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kneepoint.load import rules
from kneepoint.records import (
    Objective,
    Outcome,
    Promoted,
    Proposal,
    QualityChecked,
    Screened,
    SloCapacity,
    Validated,
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
        against: its gain did not reach the least effect worth promoting, and no prediction may
        be re-priced by it as a gain. Where that gain was real (its interval above zero) the
        outcome says so, and the walk steps on past it (``gain_shown``)."""
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
        shown = False
        if not validated.promote and incumbent is not None:
            objective = min(objective, incumbent)
            low = None if validated.judgement is None else validated.judgement.gain_low_rel
            shown = low is not None and low > 0.0
        return outcome.model_copy(update={"objective": objective, "gain_shown": shown})

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
