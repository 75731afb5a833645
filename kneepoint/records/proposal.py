"""What the search proposes and what came of it: candidates, proposals, predictions, outcomes.

Pruning turns a diagnosis into ``KnobCandidate``s (the knobs worth trying, in order, with a
direction and a predicted effect) and ``RuledOut`` knobs (with the reason, for the report).
A proposer turns candidates into ``Proposal``s, one configuration each, with the prediction
recorded before anything runs; the agent answers each with an ``Outcome``. Failures are
outcomes (``startup_failed``, ``crashed`` ...), never exceptions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue, model_validator

from kneepoint.records.base import Record
from kneepoint.records.engine import EngineConfig
from kneepoint.records.knobs import Constraint, Knob

Direction = Literal["up", "down", "to"]
"""Raise a numeric knob, lower it, or set it ``to`` a target value (bools and choices)."""
TrialStatus = Literal[
    "ok", "infeasible", "startup_failed", "crashed", "timed_out", "invalid_measurement"
]


class KnobCandidate(Record):
    """A knob worth trying against the binding constraint."""

    knob: Knob
    direction: Direction
    target: JsonValue = None
    """The value to try for ``direction: to``."""
    relieves: Constraint
    predicted_ratio: float = Field(gt=0.0)
    """Expected capacity ratio (challenger / incumbent) of the first step."""
    reason: str
    needs_quality_check: bool = False


class RuledOut(Record):
    """A knob not worth trying now, and why."""

    knob: str
    reason: str


class Pruning(Record):
    """The knob space after reasoning: what to try, in order, and what not to."""

    candidates: tuple[KnobCandidate, ...] = ()
    ruled_out: tuple[RuledOut, ...] = ()
    long_shots: tuple[KnobCandidate, ...] = ()
    """The ruled-out knobs whose own rule, not a hard limit, ruled them out, each over the
    domain it may take and priced at 1.0: under ``tuning.stop: budget`` each is moved one
    step each way from the incumbent once no candidate is left
    (``kneepoint.policies.search.long_shots``), for what the rules missed: they can rule out
    every knob with most of the budget left, and knobs each ruled out alone can gain
    together."""
    notes: dict[str, str] = Field(default_factory=dict)
    """Per knob, what its choices out of reach would do (serving an AWQ checkpoint instead):
    said once in the report's knobs, not repeated in every reason that names the knob."""


class Prediction(Record):
    """What the agent expects of a proposal, written down before it runs."""

    capacity_ratio: float = Field(gt=0.0)
    """Expected challenger / incumbent objective."""
    reason: str
    repriced_by: float = Field(default=1.0, gt=0.0)
    """The factor already in ``capacity_ratio`` from the knob's earlier measured moves
    (``kneepoint.policies.search.learning``): what the move was predicted before it is
    ``capacity_ratio / repriced_by``."""

    @property
    def direction(self) -> Literal["up", "down", "flat"]:
        if self.capacity_ratio > 1.02:
            return "up"
        return "down" if self.capacity_ratio < 0.98 else "flat"


class Proposal(Record):
    """One configuration to try."""

    config: EngineConfig
    changes: dict[str, JsonValue]
    """The knobs it sets differently from the configuration it starts from."""
    proposer: str
    """Which proposer asked for it (``coordinate``, ``optuna-tpe`` ...)."""
    reason: str
    prediction: Prediction
    params: dict[str, JsonValue] = Field(default_factory=dict)
    """The proposer's own coordinates for it (e.g. an Optuna trial's parameters)."""

    def key(self) -> str:
        """Equal for proposals of the same configuration."""
        return self.config.fingerprint()


class Outcome(Record):
    """What a proposal's trial gave."""

    status: TrialStatus
    objective: float | None = None
    """The study's objective (e.g. SLO capacity, req/s); None when nothing was measured."""
    feasible: bool = False
    """Some measured rate met every SLO."""
    detail: str = ""
    """The cause of a failure, or a note on the measurement."""
    gain_shown: bool = False
    """Validated and not promoted, but its gain's interval lay above zero: a real gain below
    the least effect worth promoting (``objective`` is then the incumbent's)."""

    @model_validator(mode="after")
    def _measured_when_ok(self) -> Outcome:
        if self.status == "ok" and self.objective is None:
            raise ValueError("objective: an ok outcome needs its objective")
        return self

    @property
    def failed(self) -> bool:
        """The configuration did not give a measurement (it did not start, died, hung...)."""
        return self.status not in ("ok", "infeasible")


class TrialPrice(Record):
    """What a trial costs and how far a prediction can be trusted, when a space was built
    (``kneepoint.policies.search.worth`` prices moves with it)."""

    floor_rel: float = Field(ge=0.0)
    """The least gain that counts: the incumbent's noise or the least effect worth promoting."""
    spread_log: float = Field(gt=0.0)
    """The spread of prediction errors, in log ratio."""
    cost_share: float = Field(ge=0.0, le=1.0)
    """One trial's share of the budget left (0: no budget set)."""


class SearchSpace(Record):
    """What a proposer searches: the candidates around an incumbent configuration."""

    incumbent: EngineConfig
    incumbent_objective: float | None = None
    """The incumbent's measured objective, for proposers that move from it."""
    current_values: dict[str, JsonValue] = Field(default_factory=dict)
    """Each candidate knob's effective value in the incumbent (engine defaults filled in)."""
    candidates: tuple[KnobCandidate, ...] = ()
    learned_factors: dict[str, float] = Field(default_factory=dict)
    """Per knob, what its latest single-knob move in the run measured over what was predicted
    (``kneepoint.policies.search.learning``), moves against earlier incumbents included: a move
    measured as a loss is not tried again at its old price after a promotion."""

    price: TrialPrice | None = None
    """What a trial costs, under ``tuning.stop: budget``: a move is tried while its expected
    gain pays for it. None: a move is tried while it is predicted beyond the least gain."""

    def knob_names(self) -> tuple[str, ...]:
        return tuple(c.knob.name for c in self.candidates)
