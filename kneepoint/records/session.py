"""Conversations: a traffic class whose requests come as sessions of turns.

A session's first turn is sent when the session arrives (by the class's arrival process); each
later turn is sent once the previous answer has finished and the user has thought, and its
prompt is the whole conversation so far (the shared system prompt, every earlier message and
answer) followed by the new message. So a session's prompts grow, each one starts with the one
before it, and a prefix cache that kept the history serves it again.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from kneepoint.records.base import InputRecord


class FixedTurns(InputRecord):
    """Every session has the same number of turns."""

    kind: Literal["fixed"] = "fixed"
    turns: int = Field(ge=1, le=1000)


class UniformTurns(InputRecord):
    """Turns drawn uniformly from an inclusive range."""

    kind: Literal["uniform"] = "uniform"
    min_turns: int = Field(ge=1, le=1000)
    max_turns: int = Field(ge=1, le=1000)

    @model_validator(mode="after")
    def _ordered(self) -> UniformTurns:
        if self.max_turns < self.min_turns:
            raise ValueError(f"max_turns ({self.max_turns}) < min_turns ({self.min_turns})")
        return self


class GeometricTurns(InputRecord):
    """Turns from a geometric distribution with the given mean (a conversation ends after
    each turn with the same chance), cut at ``max_turns``."""

    kind: Literal["geometric"] = "geometric"
    mean_turns: float = Field(ge=1.0, le=1000.0)
    max_turns: int = Field(ge=1, le=1000)

    @model_validator(mode="after")
    def _bounds(self) -> GeometricTurns:
        if self.mean_turns > self.max_turns:
            raise ValueError(f"mean_turns ({self.mean_turns}) > max_turns ({self.max_turns})")
        return self


TurnsDist = Annotated[FixedTurns | UniformTurns | GeometricTurns, Field(discriminator="kind")]


def max_turns(dist: TurnsDist) -> int:
    return dist.turns if isinstance(dist, FixedTurns) else dist.max_turns


def turn_survival(dist: TurnsDist) -> list[float]:
    """The chance a session has a turn ``t`` (0-based), for t up to its most turns."""
    if isinstance(dist, FixedTurns):
        return [1.0] * dist.turns
    if isinstance(dist, UniformTurns):
        span = dist.max_turns - dist.min_turns + 1
        return [min(1.0, (dist.max_turns - t) / span) for t in range(dist.max_turns)]
    # P(turns > t) = q^t with q = 1 - 1/mean; the cut keeps the first max_turns terms.
    q = 1.0 - 1.0 / dist.mean_turns
    return [q**t for t in range(dist.max_turns)]


def mean_turns(dist: TurnsDist) -> float:
    """The mean number of turns (a geometric's, cut at its maximum)."""
    return sum(turn_survival(dist))


class FixedThink(InputRecord):
    """The same think time before every later turn."""

    kind: Literal["fixed"] = "fixed"
    seconds: float = Field(ge=0.0, le=3600.0)


class ExponentialThink(InputRecord):
    """Exponential think times with the given mean (memoryless: a user who may come back at
    any moment), cut at ``max_s``."""

    kind: Literal["exponential"] = "exponential"
    mean_s: float = Field(gt=0.0, le=3600.0)
    max_s: float = Field(default=600.0, gt=0.0, le=3600.0)


class LognormalThink(InputRecord):
    """Lognormal think times with the given median and shape, cut at ``max_s``."""

    kind: Literal["lognormal"] = "lognormal"
    median_s: float = Field(gt=0.0, le=3600.0)
    sigma: float = Field(gt=0.0, le=4.0)
    max_s: float = Field(default=600.0, gt=0.0, le=3600.0)


ThinkDist = Annotated[FixedThink | ExponentialThink | LognormalThink, Field(discriminator="kind")]


def mean_think_s(dist: ThinkDist) -> float:
    """A think time's mean (an exponential's or lognormal's uncut mean, within its cut)."""
    if isinstance(dist, FixedThink):
        return dist.seconds
    if isinstance(dist, ExponentialThink):
        return min(dist.mean_s, dist.max_s)
    return min(dist.max_s, dist.median_s * math.exp(dist.sigma**2 / 2.0))


class Session(InputRecord):
    """How a conversational class's sessions run. The class's ``input_tokens`` are each
    turn's new message and its ``output_tokens`` each answer; its ``prefix_group`` (if any)
    is the system prompt, one document drawn per session (a group of one document: one
    prompt for every session; of several: one per tenant or agent)."""

    turns: TurnsDist
    think_time: ThinkDist = FixedThink(seconds=0.0)
    """Between seeing an answer's last token and sending the next turn."""
