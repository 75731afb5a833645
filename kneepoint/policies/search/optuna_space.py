"""A search space as Optuna sees it: distributions, parameters, and outcomes as trial results.

Each candidate knob becomes one Optuna parameter named after it: integers and floats keep their
range, log scale and step; bools and choices are categoricals. Optuna's categoricals hold only
None, bools, numbers and strings, so a dict choice (a speculative_config) is stored as its
canonical JSON text and decoded back by matching the domain's choices (the domains answer
both: ``to_param``, ``from_param``).

How outcomes are told, so that the samplers learn from failures instead of re-trying them:

- ``ok``: COMPLETE with the objective, SLO constraint 0 (feasible).
- ``startup_failed``, ``crashed``, ``timed_out``: COMPLETE with objective 0 and constraint 2:
  TPE ranks infeasible trials by violation, and GP models the constraint, so both steer away
  from the region.
- ``infeasible`` (no rate met the SLO: the screen measured no capacity) and
  ``invalid_measurement`` (the client, not the configuration, failed): FAIL, with the cause
  as the detail. Neither measured an objective, and a made-up 0 req/s would be a data point
  the samplers fit; they ignore FAIL trials (a failed configuration is still never proposed
  again).

The status and detail are kept as user attributes for the dashboard and the report.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState
from pydantic import JsonValue

from kneepoint.policies.search.space import along, effective, only_space_knobs_changed, show
from kneepoint.records import Categorical, EngineConfig, Outcome, Prediction, SearchSpace

FEASIBLE, INFEASIBLE, BROKEN = 0.0, 1.0, 2.0
"""SLO constraint values (<= 0 is feasible): met, missed, did not run to a measurement."""


class TrialResult(NamedTuple):
    state: TrialState
    value: float | None
    constraint: float | None


class _Optuna:
    """Optuna's distribution of each kind of domain (``KnobDomain.distribution``)."""

    def categorical(self, choices: tuple[Categorical, ...]) -> BaseDistribution:
        return CategoricalDistribution(choices)

    def integers(self, low: int, high: int, *, log: bool) -> BaseDistribution:
        return IntDistribution(low, high, log=log)

    def floats(self, low: float, high: float, *, step: float | None) -> BaseDistribution:
        return FloatDistribution(low, high, step=step)


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    return {c.knob.name: c.knob.domain.distribution(_Optuna()) for c in space.candidates}


def values_of(params: dict[str, Any], space: SearchSpace) -> dict[str, JsonValue]:
    return {c.knob.name: c.knob.domain.from_param(params[c.knob.name]) for c in space.candidates}


def params_of(config: EngineConfig, space: SearchSpace) -> dict[str, Any] | None:
    """A configuration's Optuna parameters in this space (knobs left at None read as their
    effective value); None when the configuration lies outside the space."""
    if not only_space_knobs_changed(config, space):
        return None
    params: dict[str, Any] = {}
    for candidate in space.candidates:
        value = effective(config, candidate.knob.name, space)
        if not candidate.knob.domain.contains(value):
            return None
        params[candidate.knob.name] = candidate.knob.domain.to_param(value)
    return params


def trial_result(outcome: Outcome) -> TrialResult:
    """How an outcome is told to Optuna (see the module docstring)."""
    if outcome.status == "ok":
        return TrialResult(TrialState.COMPLETE, outcome.objective, FEASIBLE)
    if outcome.status in ("infeasible", "invalid_measurement"):
        return TrialResult(TrialState.FAIL, None, None)
    return TrialResult(TrialState.COMPLETE, 0.0, BROKEN)


def predict(space: SearchSpace, config: EngineConfig) -> Prediction:
    """The expectation of a sampled configuration from the candidates' own predictions.

    Relieving one wall moves the bottleneck to the next, so gains are not multiplied: the
    largest first-step ratio among knobs moved the way their candidate says is expected.
    """
    moved: list[tuple[float, str]] = []
    for candidate in space.candidates:
        name = candidate.knob.name
        old, new = effective(space.incumbent, name, space), effective(config, name, space)
        if along(candidate, old, new):
            text = f"{name} {show(old)} -> {show(new)}: {candidate.reason}"
            moved.append((candidate.predicted_ratio, text))
    if not moved:
        reason = "no knob moves the way the diagnosis points: an exploration, no gain expected"
        return Prediction(capacity_ratio=1.0, reason=reason)
    ratio, reason = max(moved, key=lambda item: item[0])
    return Prediction(capacity_ratio=ratio, reason=reason)
