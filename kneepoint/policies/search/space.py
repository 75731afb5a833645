"""Pure helpers over search spaces, shared by the proposers. What a knob's domain holds and how
it is stepped the domain answers itself (``kneepoint.records.knob_domains``).

``build_config`` is the only way a proposer makes a configuration: the incumbent's own value is
kept wherever a knob goes back to the incumbent's effective value (so equal configurations have
equal fingerprints whichever proposer made them), and a change set that EngineConfig rejects
gives None: it must never be proposed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue, ValidationError

from kneepoint.records import EngineConfig, KnobCandidate, SearchSpace, canonical, same


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
    domain = candidate.knob.domain
    old_rank, new_rank = domain.rank(old), domain.rank(new)
    if old_rank is None or new_rank is None:
        return False
    return new_rank > old_rank if candidate.direction == "up" else new_rank < old_rank


def show(value: JsonValue) -> str:
    """A value as a person reads it in a reason (``null`` reads as the engine default)."""
    if value is None:
        return "default"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str | int):
        return str(value)
    return canonical(value)
