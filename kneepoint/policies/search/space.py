"""Pure helpers over knob domains and search spaces, shared by the proposers.

Numeric knobs are searched in a coordinate where a step means the same everywhere: log2 of the
value for log-scale integers (one step of 1.0 doubles the value), the value itself otherwise.
A coordinate maps back to a value the domain holds (rounded to an integer or to the float
grid, clipped to the range). Choices compare by their canonical JSON, so ``True`` is not ``1``
and a dict choice (a speculative_config) equals its copy.

``build_config`` is the only way a proposer makes a configuration: the incumbent's own value is
kept wherever a knob goes back to the incumbent's effective value (so equal configurations have
equal fingerprints whichever proposer made them), and a change set that EngineConfig rejects
gives None: it must never be proposed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue, ValidationError

from kneepoint.records.engine import EngineConfig
from kneepoint.records.knobs import BoolDomain, ChoiceDomain, FloatDomain, IntDomain, KnobDomain
from kneepoint.records.proposal import KnobCandidate, SearchSpace

NumericDomain = IntDomain | FloatDomain
_FLOAT_DIGITS = 10
"""Float knob values are rounded to this many decimals, so grid arithmetic (0.8 + 5 x 0.01)
does not leave 0.8500000000000001 in a configuration's fingerprint."""


def canonical(value: object) -> str:
    """A value's canonical JSON text: equal for equal JSON values, distinct for ``True``/``1``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def same(a: object, b: object) -> bool:
    return canonical(a) == canonical(b)


def contains(domain: KnobDomain, value: object) -> bool:
    """Whether ``value`` is one of the values the domain holds."""
    if isinstance(domain, BoolDomain):
        return isinstance(value, bool)
    if isinstance(domain, ChoiceDomain):
        return any(same(value, choice) for choice in domain.choices)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(domain, IntDomain):
        return isinstance(value, int) and domain.low <= value <= domain.high
    if domain.step is None:
        return domain.low <= value <= domain.high
    return from_coord(domain, float(value)) == value


def to_coord(domain: NumericDomain, value: float) -> float:
    """The search coordinate of a numeric value (log2 on a log scale)."""
    if isinstance(domain, IntDomain) and domain.log:
        return math.log2(max(value, 1e-300))
    return float(value)


def from_coord(domain: NumericDomain, coord: float) -> int | float:
    """The domain's value nearest to a coordinate, inside the range."""
    raw = 2.0**coord if isinstance(domain, IntDomain) and domain.log else coord
    raw = min(max(raw, domain.low), domain.high)
    if isinstance(domain, IntDomain):
        return min(max(round(raw), domain.low), domain.high)
    if domain.step is not None:
        steps = math.floor((domain.high - domain.low) / domain.step + 1e-9)
        raw = domain.low + min(round((raw - domain.low) / domain.step), steps) * domain.step
    return round(raw, _FLOAT_DIGITS)


def first_step(domain: NumericDomain) -> float:
    """The first step in coordinates: a doubling on a log scale, a quarter of the range else."""
    if isinstance(domain, IntDomain) and domain.log:
        return 1.0
    return (domain.high - domain.low) / 4.0


def midpoint(domain: NumericDomain) -> int | float:
    """The domain's middle (geometric on a log scale): where to start when nothing is known."""
    return from_coord(domain, (to_coord(domain, domain.low) + to_coord(domain, domain.high)) / 2)


def effective(config: EngineConfig, name: str, space: SearchSpace) -> JsonValue:
    """A knob's value in a configuration, the engine's default filled in from the space."""
    value: JsonValue = getattr(config, name)
    if value is None and getattr(space.incumbent, name) is None:
        return space.current_values.get(name)
    return value


def build_config(
    base: EngineConfig, values: Mapping[str, JsonValue], space: SearchSpace
) -> EngineConfig | None:
    """``base`` with knob ``values`` applied; None when EngineConfig rejects the result."""
    fields: dict[str, Any] = {}
    for name, value in values.items():
        at_incumbent = name in space.current_values and same(value, space.current_values[name])
        fields[name] = getattr(space.incumbent, name) if at_incumbent else value
    try:
        return base.replace(**fields)
    except ValidationError:
        return None


def changes_from_incumbent(config: EngineConfig, space: SearchSpace) -> dict[str, JsonValue]:
    """The fields a configuration sets differently from the space's incumbent."""
    return {name: new for name, (_, new) in config.changes_from(space.incumbent).items()}


def only_space_knobs_changed(config: EngineConfig, space: SearchSpace) -> bool:
    """Whether a configuration differs from the incumbent only in the space's knobs."""
    return set(config.changes_from(space.incumbent)) <= set(space.knob_names())


def along(candidate: KnobCandidate, old: JsonValue, new: JsonValue) -> bool:
    """Whether moving a knob from ``old`` to ``new`` goes the way its candidate says."""
    if candidate.direction == "to":
        return same(new, candidate.target)
    old_rank, new_rank = _rank(candidate.knob.domain, old), _rank(candidate.knob.domain, new)
    if old_rank is None or new_rank is None:
        return False
    return new_rank > old_rank if candidate.direction == "up" else new_rank < old_rank


def _rank(domain: KnobDomain, value: JsonValue) -> float | None:
    """A value's place in the domain's order (None for values outside it)."""
    if isinstance(domain, ChoiceDomain):
        texts = [canonical(c) for c in domain.choices]
        return float(texts.index(canonical(value))) if canonical(value) in texts else None
    if isinstance(value, bool):
        return float(value) if isinstance(domain, BoolDomain) else None
    return float(value) if isinstance(value, int | float) else None


def show(value: JsonValue) -> str:
    """A value as a person reads it in a reason (``null`` reads as the engine default)."""
    if value is None:
        return "default"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str | int):
        return str(value)
    return canonical(value)
