"""The judge's verdicts: whether a challenger beats the incumbent, and by how much.

``Judgement`` closes a validation: both arms measured with repeats, the relative gain with its
confidence interval, the smallest gain the noise lets the test detect, and the decision with a
sentence a person reads in the report. ``FinalistCheck`` is the cheaper question asked after a
screening sweep: does one screened measurement beat the incumbent by more than its noise, so
that the challenger is worth a full validation?
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import Record

RepeatsMethod = Literal["paired_t", "welch", "bootstrap"]
"""Paired t on repeat-by-repeat differences, Welch's unequal-variance t, or a percentile
bootstrap (paired when the counts match)."""
JudgeMethod = Literal[RepeatsMethod, "known_noise"]
"""A test over repeats, or one pair against the incumbent's known noise (the validation's
early look, ``kneepoint.policies.judge.early``)."""


class Judgement(Record):
    """Challenger versus incumbent over repeated measurements of the study's objective."""

    promote: bool
    method: JudgeMethod
    n_incumbent: int = Field(ge=1)
    n_challenger: int = Field(ge=1)
    incumbent_objective_mean: float
    challenger_objective_mean: float
    gain_rel: float | None
    """Challenger mean / incumbent mean - 1; None when the incumbent's mean is not positive."""
    gain_low_rel: float | None
    """Lower end of the gain's interval at ``confidence``; None with a single repeat."""
    gain_high_rel: float | None
    min_detectable_effect_rel: float | None
    """The smallest relative gain these repeats would detect (at ``confidence``, 80% power)."""
    confidence: float = Field(gt=0.0, lt=1.0)
    min_effect_rel: float = Field(ge=0.0)
    """The smallest gain worth promoting, whatever the noise."""
    reason: str


class FinalistCheck(Record):
    """Whether a screened challenger deserves a validation sweep."""

    finalist: bool
    gain_rel: float | None
    """Screened objective / incumbent objective - 1; None when either is missing or 0."""
    threshold_rel: float = Field(ge=0.0)
    """The gain it had to exceed: the minimum effect; 0 where it had only to confirm a gain
    already validated from the incumbent before (``is_finalist``'s ``validated_gain``)."""
    reason: str
