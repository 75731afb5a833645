"""The steps a run measures on a GPU, as records: ``kneepoint tune``'s decisions
(``kneepoint.tune.decide``) name them, its executor carries them out, and a shared study's
workers queue them as tasks (``kneepoint.records.task``), serialized into the study. Each names
its trial by number; the run's state, rebuilt from the ledger, holds the rest.

One GPU measures a whole validation and the whole baseline in one step; workers share them:
a validation's repeats (``Validate.repeats``) and the baseline's knee search, repeats and the
Baseline made of them are steps of their own.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.ledger import Finished

Repeats = tuple[int, int]
"""Repeats ``first`` to ``first + n - 1``: the first, and how many."""


class _Step(Record):
    step: str
    """Its name (each kind's literal, the tasks' discriminator)."""
    trial: int = Field(default=0, ge=0, le=0)
    """The trial it belongs to; 0: none (the baseline's steps, the winner's burst check)."""

    @property
    def key(self) -> str:
        """The work it names, not an attempt at it: a shared study completes each key once."""
        name = self.step if self.trial == 0 else f"trial-{self.trial}-{self.step}"
        repeats: Repeats | None = getattr(self, "repeats", None)
        return name if repeats is None else f"{name}-r{repeats[0]}"


class _OnTrial(_Step):
    trial: int = Field(ge=1)
    """The trial it is a step of."""


class Screen(_OnTrial):
    """Preflight and screen the trial's configuration."""

    step: Literal["screen"] = "screen"


class CheckQuality(_OnTrial):
    """Compare the trial's greedy outputs with the incumbent's."""

    step: Literal["quality"] = "quality"


class Validate(_OnTrial):
    """Validate the finalist against the incumbent, interleaved: the whole validation, or
    (a worker's share) some of its repeats, judged with the rest once all are in."""

    step: Literal["validate"] = "validate"
    repeats: Repeats | None = None


class Promote(_OnTrial):
    """Make the validated winner the incumbent."""

    step: Literal["promote"] = "promote"


class CheckBurst(_Step):
    """Burst the winner and time its recovery (after the search has finished)."""

    step: Literal["burst"] = "burst"
    stopped: Finished | None = None
    """Why the search stopped, where the run's state does not yet say (a shared study's
    burst task: its run finishes with the stop once the check is in)."""


class SearchKnee(_Step):
    """The baseline's knee search (a worker's share of the baseline)."""

    step: Literal["knee"] = "knee"


class MeasureRepeats(_Step):
    """Some of the baseline's repeats around its knee (a worker's share)."""

    step: Literal["repeats"] = "repeats"
    repeats: Repeats


class JoinBaseline(_Step):
    """The run's Baseline made of its knee search and repeats (no device time)."""

    step: Literal["baseline"] = "baseline"


TrialStep = Screen | CheckQuality | Validate | Promote
"""A trial's steps."""
TaskStep = Annotated[
    TrialStep | CheckBurst | SearchKnee | MeasureRepeats | JoinBaseline,
    Field(discriminator="step"),
]
"""What one task of a shared study measures."""
