"""A unit of GPU work in a shared study (``kneepoint worker``), and what it gave.

Workers on many GPUs share one Optuna study in PostgreSQL; each Optuna trial there is one
task: the baseline's knee search, some of its repeats, or its Baseline made of them; the
screen of one proposal, a finalist's quality check, part of its validation (some of its
repeats, the incumbent and the challenger interleaved on one GPU, so a repeat's pair is never
split), its promotion; or the burst check of the winner once the search has stopped. A task's
key
names the work, not the attempt: a dead worker's trial is re-queued by Optuna with the same
task, and at most one attempt of a key ever completes.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import Field

from kneepoint.records.actions import TaskStep
from kneepoint.records.base import Record
from kneepoint.records.ledger import (
    Baseline,
    BurstChecked,
    Event,
    Finished,
    Promoted,
    QualityChecked,
    Screened,
)
from kneepoint.records.proposal import Proposal
from kneepoint.records.shares import BaselinePart, ValidationPart

Recorded = Annotated[
    Baseline | Screened | QualityChecked | Promoted | BurstChecked, Field(discriminator="event")
]
"""The ledger events a task can record."""
R = TypeVar("R", Baseline, Screened, QualityChecked, Promoted, BurstChecked)


class Task(Record):
    action: TaskStep
    """What it measures (``kneepoint.records.actions``), as the run's executor takes it."""
    generation: int = Field(ge=0)
    """The incumbent it is measured against: 0 the baseline, k the k-th promotion."""
    batch: int = Field(default=1, ge=1)
    """The planning that queued it (1: the baseline's); a batch's tasks run side by side,
    and the next is planned when all of them are in."""
    proposal: Proposal | None = None
    """What a screen measures (None for the baseline; a validation's is its screen's)."""
    quality_check: bool = False
    """A knob it changes alters model outputs: a quality task checks greedy outputs before
    its validation."""
    workers: int = Field(default=1, ge=1)
    """The live workers its batch was planned for (tasks past them wait for a free one)."""

    @property
    def key(self) -> str:
        return self.action.key

    @property
    def trial(self) -> int:
        """The trial it belongs to (0: the baseline or the winner)."""
        return self.action.trial


class TaskResult(Record):
    """What a finished task gave: the ledger events it recorded (the baseline, a screen, a
    quality check, a promotion or the burst check), or part of a measurement the run judges
    whole, or why it could not be measured."""

    events: tuple[Recorded, ...] = ()
    """In the order the run took the steps, as ``kneepoint tune`` records them."""
    part: ValidationPart | None = None
    """Not a ledger event: the run's Validated is judged on all of a validation's parts."""
    baseline_part: BaselinePart | None = None
    """Not a ledger event: the run's Baseline is made of its knee search and repeats."""
    failure: str | None = None
    """Why the baseline or part of it could not be measured (its server would not start,
    or died)."""
    worker: str
    """The worker that ran it (``host/gpuN``)."""

    @classmethod
    def from_events(cls, events: list[Event], *, worker: str) -> TaskResult:
        """A task's result from the events its steps recorded (a Finished: the baseline
        could not be measured, and why)."""
        failure = next((e.detail for e in events if isinstance(e, Finished)), None)
        kept = tuple(e for e in events if not isinstance(e, Finished))
        return cls.model_validate({"events": kept, "failure": failure, "worker": worker})

    def of(self, kind: type[R]) -> R | None:
        """The event of this kind it recorded, if any."""
        return next((e for e in self.events if isinstance(e, kind)), None)

    @property
    def device_s(self) -> float:
        """The device time this task spent (a Baseline's was spent by the tasks that
        measured its parts)."""
        spent = [e for e in self.events if not isinstance(e, (Baseline, Promoted))]
        parts = [p for p in (self.part, self.baseline_part) if p is not None]
        return sum(e.device_s for e in spent) + sum(p.device_s for p in parts)
