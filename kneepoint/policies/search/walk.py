"""One knob's walk in coordinate descent (``kneepoint.policies.search.coordinate``), pure: where
it stands, the next numeric value it steps to, what a measured step means for it, and how a
step that did not gain shrinks the next (halved back toward the centre, never past a wall)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from kneepoint.records import EngineConfig, KnobCandidate, Outcome

Result = Literal["better", "onward", "flat", "wall"]
WALLS = frozenset({"startup_failed", "crashed", "timed_out"})
"""Outcomes that make a wall: a configuration that did not start, crashed or hung."""


@dataclass
class Walk:
    """Where the walk along one candidate knob stands."""

    index: int
    step: float
    """The next numeric step, in the domain's coordinate (log2 on a log scale)."""
    halvings: int = 0
    limit: float | None = None
    """Coordinate of a wall (a configuration that failed): never go this far again."""
    tries: int = 0
    finished: bool = False
    bracketed: bool = False
    """The last step started and measured no gain: the next, a halving back toward the centre,
    lies between two measurements."""


@dataclass(frozen=True)
class Step:
    candidate: KnobCandidate
    old: JsonValue
    value: JsonValue
    config: EngineConfig | None
    one_shot: bool
    """A single try (a target, a bool, a numeric knob with no known value), not a walk."""


def start(candidates: tuple[KnobCandidate, ...], index: int) -> Walk | None:
    """The walk of candidate ``index`` before its first step (None: no candidate left)."""
    if index >= len(candidates):
        return None
    domain = candidates[index].knob.domain
    return Walk(index=index, step=domain.first_step() if domain.numeric else 0.0)


def next_number(walk: Walk, old: float, candidate: KnobCandidate) -> tuple[float, ...]:
    """The numeric value one step from ``old`` (empty: the step leaves the domain, rounds to
    nothing or would reach a wall)."""
    domain = candidate.knob.domain
    assert domain.numeric
    sign = 1.0 if candidate.direction == "up" else -1.0
    centre = domain.to_coord(old)
    target = centre + sign * walk.step
    if walk.limit is not None and sign * (target - walk.limit) >= 0:
        target = (centre + walk.limit) / 2.0  # bisect toward the wall, never onto it
    value = domain.from_coord(target)
    if sign * (value - old) <= 0:
        return ()  # at the domain's edge, or the step rounds to nothing
    if walk.limit is not None and sign * (domain.to_coord(value) - walk.limit) >= 0:
        return ()
    return (value,)


def result_of(outcome: Outcome, reference: float | None, min_gain: float) -> Result:
    """What a measured step means for the walk, against the centre's objective."""
    if outcome.status in WALLS:
        return "wall"
    if outcome.status != "ok" or outcome.objective is None:
        return "flat"
    if outcome.gain_shown:
        return "onward"
    if reference is None:
        return "better"  # nothing measured to compare with: any measurement is a start
    threshold = reference + abs(reference) * min_gain
    return "better" if outcome.objective > threshold else "flat"


def shrink(walk: Walk, step: Step, result: Result, max_halvings: int) -> None:
    """After a step that did not move the centre: a one-shot or non-numeric walk ends; a
    numeric one halves its step back toward the centre (a wall remembered), at most
    ``max_halvings`` times."""
    domain = step.candidate.knob.domain
    if step.one_shot or not domain.numeric:
        walk.finished = True
        return
    assert isinstance(step.value, int | float) and isinstance(step.old, int | float)
    tried, centre = domain.to_coord(step.value), domain.to_coord(step.old)
    if result == "wall":
        walk.limit = tried
    walk.step = abs(tried - centre) / 2.0
    walk.halvings += 1
    walk.finished = walk.halvings > max_halvings or math.isclose(walk.step, 0.0)
