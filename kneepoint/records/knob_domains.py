"""Knob domains: the values a knob can take, each kind answering for itself what search and
pruning ask of it (as Optuna's distributions do), so no caller matches on the kind.

Every domain says whether it holds a value (``contains``), a value's place in its order
(``rank``), the values one step from a value (``neighbours``), the values its catalogue entry
writes out (``named_values``), its choices if it is a choice (``choices_or_empty``), and how a
sampler holds it (``distribution``, ``to_param``, ``from_param``). A switch or a choice says
the value one step along its order (``next_value``); a numeric range is ``numeric`` and has
coordinates.

Numeric knobs are searched in a coordinate where a step means the same everywhere: log2 of the
value for log-scale integers (one step of 1.0 doubles the value), the value itself otherwise.
A coordinate maps back to a value the domain holds (rounded to an integer or to the float
grid, clipped to the range). Choices compare by their canonical JSON, so ``True`` is not ``1``
and a dict choice (a speculative_config) equals its copy.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import Field, JsonValue, model_validator

from kneepoint.records.base import InputRecord

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

Categorical = bool | int | float | str | None
"""What a sampler's categorical parameter holds (Optuna's hold nothing else)."""

_FLOAT_DIGITS = 10
"""Float knob values are rounded to this many decimals, so grid arithmetic (0.8 + 5 x 0.01)
does not leave 0.8500000000000001 in a configuration's fingerprint."""


def canonical(value: object) -> str:
    """A value's canonical JSON text: equal for equal JSON values, distinct for ``True``/``1``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def same(a: object, b: object) -> bool:
    return canonical(a) == canonical(b)


class Distributions(Protocol[T_co]):
    """What a sampler makes of each kind of domain (``optuna_space`` makes Optuna's)."""

    def categorical(self, choices: tuple[Categorical, ...]) -> T_co: ...

    def integers(self, low: int, high: int, *, log: bool) -> T_co: ...

    def floats(self, low: float, high: float, *, step: float | None) -> T_co: ...


class _Domain(InputRecord):
    """What every kind answers alike unless it says otherwise."""

    @property
    def choices_or_empty(self) -> tuple[JsonValue, ...]:
        """The choices of a choice domain, in order; empty for any other."""
        return ()

    def to_param(self, value: JsonValue) -> JsonValue:
        """A value as a sampler's parameter holds it (``from_param``'s inverse)."""
        return value


class _Range(_Domain):
    """What a numeric range answers alike, from its coordinates (its kind maps them)."""

    if TYPE_CHECKING:  # each kind declares its own (so its fields keep their order)
        low: float
        high: float
    numeric: ClassVar[Literal[True]] = True

    # each kind maps its own coordinates and says what it holds
    def to_coord(self, value: float) -> float:
        raise NotImplementedError

    def from_coord(self, coord: float) -> float:
        raise NotImplementedError

    def first_step(self) -> float:
        raise NotImplementedError

    def contains(self, value: object) -> bool:
        raise NotImplementedError

    def rank(self, value: JsonValue) -> float | None:
        """A value's place in the order: any number itself (None for anything else)."""
        return _number_rank(value)

    def midpoint(self) -> float:
        """The middle (geometric on a log scale): where to start when nothing is known."""
        return self.from_coord((self.to_coord(self.low) + self.to_coord(self.high)) / 2)

    def neighbours(self, value: JsonValue) -> list[JsonValue]:
        """The values one first step from ``value`` each way that the range holds (up first)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return []
        centre, step = self.to_coord(value), self.first_step()
        found = [self.from_coord(centre + step), self.from_coord(centre - step)]
        return [v for v in dict.fromkeys(found) if v != value and self.contains(v)]

    @property
    def named_values(self) -> tuple[JsonValue, ...]:
        """The range's ends."""
        return (self.low, self.high)


class IntDomain(_Range):
    kind: Literal["int"] = "int"
    low: int
    high: int
    log: bool = False
    """Search on a log scale (sizes that matter in ratios, like batch caps)."""

    @model_validator(mode="after")
    def _ordered(self) -> IntDomain:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be > low ({self.low})")
        if self.log and self.low < 1:
            raise ValueError("a log-scale domain needs low >= 1")
        return self

    def contains(self, value: object) -> bool:
        """Whether ``value`` is an integer (not a bool) inside the range."""
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return self.low <= value <= self.high

    def to_coord(self, value: float) -> float:
        """The search coordinate of a value (log2 on a log scale)."""
        return math.log2(max(value, 1e-300)) if self.log else float(value)

    def from_coord(self, coord: float) -> int:
        """The domain's value nearest to a coordinate, inside the range."""
        raw = min(max(2.0**coord if self.log else coord, self.low), self.high)
        return min(max(round(raw), self.low), self.high)

    def first_step(self) -> float:
        """The first step in coordinates: a doubling on a log scale, a quarter of the range
        else."""
        return 1.0 if self.log else (self.high - self.low) / 4.0

    def distribution(self, make: Distributions[T]) -> T:
        return make.integers(self.low, self.high, log=self.log)

    def from_param(self, param: Any) -> JsonValue:
        """The value a sampler's parameter stands for."""
        return int(param)


class FloatDomain(_Range):
    kind: Literal["float"] = "float"
    low: float
    high: float
    step: float | None = Field(default=None, gt=0.0)

    @model_validator(mode="after")
    def _ordered(self) -> FloatDomain:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be > low ({self.low})")
        return self

    def contains(self, value: object) -> bool:
        """Whether ``value`` is a number (not a bool) inside the range, on its grid if any."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.step is None:
            return self.low <= value <= self.high
        return self.from_coord(float(value)) == value

    def to_coord(self, value: float) -> float:
        """The search coordinate of a value: the value itself."""
        return float(value)

    def from_coord(self, coord: float) -> float:
        """The domain's value nearest to a coordinate, inside the range and on its grid."""
        raw = min(max(coord, self.low), self.high)
        if self.step is not None:
            steps = math.floor((self.high - self.low) / self.step + 1e-9)
            raw = self.low + min(round((raw - self.low) / self.step), steps) * self.step
        return round(raw, _FLOAT_DIGITS)

    def first_step(self) -> float:
        """The first step in coordinates: a quarter of the range."""
        return (self.high - self.low) / 4.0

    def distribution(self, make: Distributions[T]) -> T:
        return make.floats(self.low, self.high, step=self.step)

    def from_param(self, param: Any) -> JsonValue:
        """The value a sampler's parameter stands for, on the grid."""
        return self.from_coord(param)


class BoolDomain(_Domain):
    kind: Literal["bool"] = "bool"
    numeric: ClassVar[Literal[False]] = False

    def contains(self, value: object) -> bool:
        return isinstance(value, bool)

    def rank(self, value: JsonValue) -> float | None:
        """A value's place in the order: off before on (a number ranks as itself)."""
        return float(value) if isinstance(value, bool) else _number_rank(value)

    def neighbours(self, value: JsonValue) -> list[JsonValue]:
        """The other setting of the switch (both where ``value`` is not a bool)."""
        return [not value] if isinstance(value, bool) else [True, False]

    def next_value(self, old: JsonValue, up: bool) -> tuple[JsonValue, ...]:
        """On (up) or off, wherever the switch was."""
        return (up,)

    @property
    def named_values(self) -> tuple[JsonValue, ...]:
        """None: a switch writes out no value."""
        return ()

    def distribution(self, make: Distributions[T]) -> T:
        return make.categorical((False, True))

    def from_param(self, param: Any) -> JsonValue:
        return bool(param)


class ChoiceDomain(_Domain):
    kind: Literal["choice"] = "choice"
    choices: tuple[JsonValue, ...] = Field(min_length=2)
    numeric: ClassVar[Literal[False]] = False

    def contains(self, value: object) -> bool:
        """Whether ``value`` is one of the choices (by canonical JSON)."""
        return any(same(value, choice) for choice in self.choices)

    def rank(self, value: JsonValue) -> float | None:
        """A value's place in the choices' order (None for a value not among them)."""
        texts = [canonical(c) for c in self.choices]
        return float(texts.index(canonical(value))) if canonical(value) in texts else None

    def neighbours(self, value: JsonValue) -> list[JsonValue]:
        """Every other choice, in order."""
        return [c for c in self.choices if not same(c, value)]

    def next_value(self, old: JsonValue, up: bool) -> tuple[JsonValue, ...]:
        """The next choice in order from ``old`` (up) or the one before; from outside the
        choices the first (up) or the last; nothing past either end."""
        here = next((i for i, c in enumerate(self.choices) if same(c, old)), None)
        if here is None:
            return (self.choices[0] if up else self.choices[-1],)
        there = here + (1 if up else -1)
        return (self.choices[there],) if 0 <= there < len(self.choices) else ()

    @property
    def choices_or_empty(self) -> tuple[JsonValue, ...]:
        return self.choices

    @property
    def named_values(self) -> tuple[JsonValue, ...]:
        """Every choice."""
        return self.choices

    def distribution(self, make: Distributions[T]) -> T:
        return make.categorical(tuple(self.to_param(c) for c in self.choices))

    def to_param(self, value: JsonValue) -> Categorical:
        """A choice as a categorical holds it: dicts and lists as their canonical JSON text."""
        return canonical(value) if isinstance(value, dict | list) else value

    def from_param(self, param: Any) -> JsonValue:
        """The choice a categorical parameter stands for."""
        return next(c for c in self.choices if canonical(self.to_param(c)) == canonical(param))


KnobDomain = Annotated[
    IntDomain | FloatDomain | BoolDomain | ChoiceDomain,
    Field(discriminator="kind"),
]


def _number_rank(value: JsonValue) -> float | None:
    if isinstance(value, bool):
        return None
    return float(value) if isinstance(value, int | float) else None
