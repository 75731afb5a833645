"""A unit of GPU work in a shared study (``kneepoint worker``), and what it gave.

Workers on many GPUs share one Optuna study in PostgreSQL; each Optuna trial there is one
task: the baseline, the screen of one proposal, the validation of one finalist (the
incumbent and the challenger interleaved on one GPU, so the pair is one task), or the burst
check of the winner once the search has stopped. A task's key
names the work, not the attempt: a dead worker's trial is re-queued by Optuna with the same
task, and at most one attempt of a key ever completes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.ledger import (
    Baseline,
    BurstChecked,
    Event,
    Finished,
    Promoted,
    QualityChecked,
    Screened,
    Validated,
)
from kneepoint.records.proposal import Proposal

Recorded = Baseline | Screened | QualityChecked | Validated | Promoted | BurstChecked
_FIELD: dict[type, str] = {
    Baseline: "baseline",
    Screened: "screened",
    QualityChecked: "quality",
    Validated: "validated",
    Promoted: "promoted",
    BurstChecked: "burst",
}
TaskKind = Literal["baseline", "screen", "validate", "promote", "burst"]


class Task(Record):
    kind: TaskKind
    trial: int = Field(ge=0)
    """The trial it belongs to (0: the baseline)."""
    generation: int = Field(ge=0)
    """The incumbent it is measured against: 0 the baseline, k the k-th promotion."""
    batch: int = Field(default=1, ge=1)
    """The planning that queued it (1: the baseline's); a batch's tasks run side by side,
    and the next is planned when all of them are in."""
    proposal: Proposal | None = None
    """What a screen measures (None for the baseline; a validation's is its screen's)."""
    quality_check: bool = False
    """A knob it changes alters model outputs: the validation checks greedy outputs first."""
    stopped: Finished | None = None
    """Why the search stopped, for the burst check that follows it (its budget stops skip it,
    as in ``kneepoint tune``); the run finishes with it once the check is in."""

    @property
    def key(self) -> str:
        if self.kind in ("baseline", "burst"):
            return self.kind
        return f"trial-{self.trial}-{self.kind}"


class TaskResult(Record):
    """What a finished task recorded: the baseline; a screen; or a validation's quality
    check (if it had one), its judgement and, when the judge promoted it, the promotion."""

    baseline: Baseline | None = None
    screened: Screened | None = None
    quality: QualityChecked | None = None
    validated: Validated | None = None
    promoted: Promoted | None = None
    burst: BurstChecked | None = None
    failure: str | None = None
    """Why the baseline could not be measured (its server would not start, or died)."""
    worker: str
    """The worker that ran it (``host/gpuN``)."""

    @classmethod
    def from_events(cls, events: list[Event], *, worker: str) -> TaskResult:
        """A task's result from the events its steps recorded (a Finished: the baseline
        could not be measured, and why)."""
        fields: dict[str, object] = {"worker": worker}
        for event in events:
            if isinstance(event, Finished):
                fields["failure"] = event.detail
            else:
                fields[_FIELD[type(event)]] = event
        return cls.model_validate(fields)

    def events(self) -> tuple[Recorded, ...]:
        """What it recorded, in the order the run took the steps."""
        recorded = (
            self.baseline,
            self.screened,
            self.quality,
            self.validated,
            self.promoted,
            self.burst,
        )
        return tuple(e for e in recorded if e is not None)

    @property
    def device_s(self) -> float:
        events = (self.baseline, self.screened, self.quality, self.validated, self.burst)
        return sum(e.device_s for e in events if e is not None)
