"""How long a workload's requests are: the distributions a traffic class draws its prompt and
output lengths from, in tokens, and their bounds and means."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from kneepoint.records.base import InputRecord


class FixedLength(InputRecord):
    """Every request has the same length."""

    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1)


class UniformLength(InputRecord):
    """Lengths drawn uniformly from an inclusive integer range."""

    kind: Literal["uniform"] = "uniform"
    min_tokens: int = Field(ge=1)
    max_tokens: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) < min_tokens ({self.min_tokens})")
        return self


class LognormalLength(InputRecord):
    """Lengths from a lognormal with the given median and shape, clipped to [min, max]."""

    kind: Literal["lognormal"] = "lognormal"
    median_tokens: int = Field(ge=1)
    sigma: float = Field(gt=0.0, le=4.0)
    """Standard deviation of log(length); 0.5 is moderate spread, 1.0 heavy-tailed."""
    min_tokens: int = Field(default=1, ge=1)
    max_tokens: int = Field(ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> LognormalLength:
        if not self.min_tokens <= self.median_tokens <= self.max_tokens:
            raise ValueError("need min_tokens <= median_tokens <= max_tokens")
        return self


class EmpiricalLength(InputRecord):
    """Lengths drawn from observed values, optionally weighted."""

    kind: Literal["empirical"] = "empirical"
    values_tokens: tuple[Annotated[int, Field(ge=1)], ...] = Field(min_length=1)
    weights: tuple[Annotated[float, Field(gt=0.0)], ...] | None = None

    @model_validator(mode="after")
    def _weights_match(self) -> EmpiricalLength:
        if self.weights is not None and len(self.weights) != len(self.values_tokens):
            raise ValueError(
                f"weights has {len(self.weights)} entries, values_tokens {len(self.values_tokens)}"
            )
        return self


LengthDist = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength,
    Field(discriminator="kind"),
]


def max_length_tokens(dist: LengthDist) -> int:
    """The largest length a distribution can produce."""
    if isinstance(dist, FixedLength):
        return dist.tokens
    if isinstance(dist, EmpiricalLength):
        return max(dist.values_tokens)
    return dist.max_tokens


def mean_length_tokens(dist: LengthDist) -> float:
    """A distribution's mean length (a lognormal's unclipped mean, clipped to its bounds)."""
    if isinstance(dist, FixedLength):
        return float(dist.tokens)
    if isinstance(dist, UniformLength):
        return (dist.min_tokens + dist.max_tokens) / 2.0
    if isinstance(dist, EmpiricalLength):
        weights = dist.weights or (1.0,) * len(dist.values_tokens)
        return sum(v * w for v, w in zip(dist.values_tokens, weights, strict=True)) / sum(weights)
    mean = dist.median_tokens * math.exp(dist.sigma**2 / 2.0)
    return min(float(dist.max_tokens), max(float(dist.min_tokens), mean))
