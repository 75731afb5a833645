"""The steps a run measures on a GPU, as records: ``kneepoint tune``'s decisions
(``kneepoint.tune.decide``, ``kneepoint.tune.dispatch``) name them and its executors carry them
out. Each names its trial by number; the run's state, rebuilt from the ledger, holds the rest.

One GPU measures a whole validation and the whole baseline in one step; a pool of GPUs shares
them: a validation's repeats (``Validate.repeats``) and the baseline's knee search, repeats and
the Baseline made of them are steps of their own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import Record

Repeats = tuple[int, int]
"""Repeats ``first`` to ``first + n - 1``: the first, and how many."""


class _Step(Record):
    step: str
    """Its name (each kind's literal)."""
    trial: int = Field(default=0, ge=0, le=0)
    """The trial it belongs to; 0: none (the baseline's steps, the winner's burst check)."""

    @property
    def key(self) -> str:
        """The work it names, not an attempt at it: the pool's driver lands each key once."""
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
    (a pool slot's share) some of its repeats, judged with the rest once all are in."""

    step: Literal["validate"] = "validate"
    repeats: Repeats | None = None


class Promote(_OnTrial):
    """Make the validated winner the incumbent."""

    step: Literal["promote"] = "promote"


class CheckBurst(_Step):
    """Burst the winner and time its recovery (after the search has finished)."""

    step: Literal["burst"] = "burst"


class SearchKnee(_Step):
    """The baseline's knee search (a pool slot's share of the baseline)."""

    step: Literal["knee"] = "knee"


class MeasureRepeats(_Step):
    """Some of the baseline's repeats around its knee (a pool slot's share)."""

    step: Literal["repeats"] = "repeats"
    repeats: Repeats


class JoinBaseline(_Step):
    """The run's Baseline made of its knee search and repeats (no device time)."""

    step: Literal["baseline"] = "baseline"


TrialStep = Screen | CheckQuality | Validate | Promote
"""A trial's steps."""
