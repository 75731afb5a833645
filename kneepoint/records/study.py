"""A tuning study: what to serve on what, how to start it, the traffic, the SLOs, the goal,
the budget and the knobs to search. This is the validated, fully resolved form: catalogue
names and preset references in the study file have already been replaced by their records.

Cross-field problems are raised as ``"<path>: <problem>"`` with the path relative to the
study, so the config loader can point at the offending field and its line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kneepoint.records.backend_spec import Backend, SimBackend
from kneepoint.records.base import InputRecord
from kneepoint.records.budget import Budget
from kneepoint.records.calibration import Calibration
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig
from kneepoint.records.hardware import GpuSpec, ModelSpec
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.limits import (
    MAX_POINT_REQUESTS,
    MAX_POINT_SECONDS,
    MAX_RATE_RPS,
    MAX_SEARCH_RPS,
    MAX_WAIT_SECONDS,
)
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.objective import Objective, PeakThroughput, SloCapacity
from kneepoint.records.slo import Slo
from kneepoint.records.workload import Workload

StopRule = Literal["budget", "predicted"]
"""``tuning.stop``: on the budget (and measured diminishing returns), or on the price list."""


def _known_knob(name: str, info: ValidationInfo) -> str:
    catalogue = (info.context or {}).get("knobs")
    if isinstance(catalogue, KnobCatalogue) and catalogue.get(name) is None:
        known = ", ".join(catalogue.names())
        raise ValueError(f"no knob named {name!r} in the catalogue ({known})")
    return name


class SearchSpec(InputRecord):
    """Which knobs the study may change."""

    knobs: tuple[Annotated[str, AfterValidator(_known_knob)], ...] = ()
    """Knob names from configs/knobs.yaml; empty means every catalogue knob."""

    @field_validator("knobs")
    @classmethod
    def _unique(cls, knobs: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({k for k in knobs if knobs.count(k) > 1})
        if repeated:
            raise ValueError(f"listed more than once: {', '.join(repeated)}")
        return knobs


class BurstSpec(InputRecord):
    """The burst check the winner gets after the search (``kneepoint.load.burst``): the
    operating rate, a step up to ``factor`` times it for ``seconds``, then back."""

    enabled: bool = True
    factor: float = Field(default=2.5, gt=1.0, le=5.0)
    """The burst over the operating rate (2-3x is a traffic spike a fleet's headroom does not
    absorb: a replica lost, a retry storm)."""
    seconds: float = Field(default=10.0, gt=0.0, le=600.0)
    recover_within_s: float = Field(default=60.0, gt=0.0, le=3600.0)
    """A winner whose TTFT is not back within the SLO this long after the burst is flagged."""


class TuningSpec(InputRecord):
    """How the loop measures and decides: sizes of its sweeps, its statistics, its proposers."""

    start_rps: float = Field(default=1.0, gt=0.0, le=MAX_RATE_RPS)
    """First rate of the baseline's knee search (it doubles from here)."""
    transient_retries: int = Field(default=1, ge=0, le=5)
    """Times a sweep whose server crashed or hung is run again on a fresh server: such
    failures are often passing (a GPU Xid, a driver hiccup). A server that refuses to start
    or a configuration vLLM rejects fails the same way every time and is never retried."""
    screen_seconds: float = Field(default=15.0, gt=0.0, le=MAX_POINT_SECONDS)
    """Arrivals per screening load point, in seconds (at least 40 requests)."""
    screen_time_cap_s: float = Field(default=120.0, gt=0.0, le=MAX_WAIT_SECONDS)
    """Hard cap on one screening sweep, in device seconds."""
    validate_seconds: float = Field(default=30.0, gt=0.0, le=MAX_POINT_SECONDS)
    """Arrivals per validation load point, in seconds (at least 40 requests)."""
    validate_repeats: int = Field(default=3, ge=2, le=10)
    """Repeats of a validation: one run cannot tell signal from noise."""
    early_look: bool = True
    """Judge a validation after its first interleaved pair too, against the incumbent's
    known noise, and promote a gain far beyond it without the other repeats
    (``kneepoint.policies.judge.early``). Several GPUs measure a validation's first
    repeats side by side instead, unless the round's validations fill them."""
    min_effect_rel: float = Field(default=0.03, ge=0.0, lt=1.0)
    """Smallest relative gain worth promoting, whatever the noise."""
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    stop: StopRule = "budget"
    """budget: the search goes on while a move's expected gain pays for its share of the
    budget left (``kneepoint.policies.search.worth``), Optuna over the pruned knobs once the
    walk is done, and stops on the budget or after ``patience`` trials in a row without a
    promotion. predicted: it stops as soon as no move left is predicted beyond the noise."""
    patience: int = Field(default=8, ge=1, le=100)
    """Trials in a row without a promotion after which the search stops on diminishing
    returns (``stop: budget``). 8: on the quickstart the walk's seven flat trials after its
    first promotion were followed by Optuna's first, which found 512 sequences with
    1,024-token chunks and fp8 KV at 53.70 req/s (+20%; at 4 the run stopped at 44.75,
    15.9% below its grid's optimum: benchmarks/regret.py)."""
    proposer: Literal["auto", "coordinate", "optuna"] = "auto"
    """auto: coordinate descent over the pruned knobs, then Optuna when it runs out."""
    sampler: Literal["tpe", "gp"] = "tpe"
    """Optuna's sampler (gp needs torch and scipy)."""
    quality_threshold: float = Field(default=0.9, ge=0.0, le=1.0)
    """Least share of greedy output tokens that must match the incumbent's for an
    output-changing knob (quantization, fp8 KV) to be accepted."""
    burst: BurstSpec = BurstSpec()
    quality_prompts: int = Field(default=8, ge=1, le=256)
    quality_tokens: int = Field(default=32, ge=1, le=1024)

    @property
    def max_rate_rps(self) -> float:
        """The highest rate a search may climb to: MAX_SEARCH_RPS, or lower where one point
        of the longest kind would plan more than MAX_POINT_REQUESTS (the first point's bound,
        held for every point: an hour-long point doubling from 1 req/s toward 10,000 would
        plan 36M)."""
        longest = max(self.screen_seconds, self.validate_seconds)
        return min(MAX_SEARCH_RPS, MAX_POINT_REQUESTS / longest)

    @model_validator(mode="after")
    def _first_point_fits(self) -> TuningSpec:
        planned = self.start_rps * max(self.screen_seconds, self.validate_seconds)
        if planned > MAX_POINT_REQUESTS:
            raise ValueError(
                f"start_rps x the longest point plans {planned:,.0f} requests in "
                f"one point; at most {MAX_POINT_REQUESTS:,} fit"
            )
        return self


class FleetSpec(InputRecord):
    """What the tune report sizes a fleet for (``kneepoint.load.fleet``), priced at
    ``budget.price_per_gpu_hour_usd`` or else the GPU catalogue's typical price."""

    peak_rps: float | None = Field(default=None, gt=0.0)
    """The peak offered rate the fleet must carry within the SLO; None sizes one replica's
    price only."""
    peak_to_average: float = Field(default=2.0, ge=1.0)
    """Peak rate over the average one, which sets the tokens the fleet is paid for. 2.0 is
    an assumption, not a measurement: set it from your own traffic."""
    headroom: float = Field(default=0.2, ge=0.0, lt=1.0)
    """Share of each replica's SLO capacity held back at the peak (for bursts and a replica
    lost): 0.2 runs replicas at most at 80% of capacity, a common margin, not a measurement."""


class StudySpec(InputRecord):
    """Everything one tuning study needs, validated and resolved."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", max_length=80)
    """Study id; names the run folder runs/<name>-<timestamp>."""
    description: str = ""
    seed: int = Field(default=0, ge=0, lt=2**32)
    """Seeds the proposers too: Optuna's samplers take numpy's 32-bit unsigned seeds."""
    gpu: GpuSpec
    gpus: int = Field(default=1, ge=1, le=64)
    """GPUs one server may use: above 1, tensor_parallel_size is searched up to it, the
    objective is per GPU (unless the objective sets per_gpu itself), and the winner fills the
    rest with data-parallel replicas (``kneepoint.load.node``)."""
    model: ModelSpec
    backend: Backend = SimBackend()
    engine: EngineConfig
    """The starting (incumbent) configuration."""
    workload: Workload
    slo: Slo | None = None
    objective: Objective = SloCapacity()
    budget: Budget = Budget()
    search: SearchSpec = SearchSpec()
    tuning: TuningSpec = TuningSpec()
    measurement: MeasurementSpec = MeasurementSpec()
    fleet: FleetSpec = FleetSpec()
    calibration: Calibration | None = None
    """The simulator's constants fitted to a real engine (``kneepoint calibrate``): used by
    the virtual clock and by every step the predictions price. None: the built-in ones."""

    @model_validator(mode="before")
    @classmethod
    def _per_gpu_with_several(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("gpus"), int) or data["gpus"] < 2:
            return data
        objective = data.get("objective", {"kind": "slo_capacity"})
        # goodput at a fixed rate counts the rate offered to the server, whatever its width
        if (
            isinstance(objective, dict)
            and "per_gpu" not in objective
            and objective.get("kind", "slo_capacity") != "goodput_at_rate"
        ):
            return {**data, "objective": {**objective, "per_gpu": True}}
        return data

    @property
    def efficiency(self) -> Efficiency | None:
        return self.calibration.efficiency if self.calibration is not None else None

    @model_validator(mode="after")
    def _slo_matches_workload(self) -> StudySpec:
        classes = self.workload.class_names()
        if self.slo is None:
            if not isinstance(self.objective, PeakThroughput):
                raise ValueError(f"slo: objective {self.objective.kind} needs SLOs")
            return self
        for name in self.slo.classes:
            if name not in classes:
                raise ValueError(
                    f"slo.classes.{name}: no traffic class named {name!r} in workload "
                    f"{self.workload.name!r} (classes: {', '.join(classes)})"
                )
        missing = [c for c in classes if self.slo.for_class(c) is None]
        if missing:
            raise ValueError(f"slo: no SLO for classes {', '.join(missing)} and no default")
        return self

    @model_validator(mode="after")
    def _slot_origin_has_a_cap(self) -> StudySpec:
        if self.measurement.latency_from == "slot" and self.workload.client.max_concurrency is None:
            raise ValueError(
                "measurement.latency_from: slot counts from when a capped client's slot "
                "freed; set workload.client.max_concurrency, or use schedule"
            )
        return self

    @model_validator(mode="after")
    def _engine_fits_model(self) -> StudySpec:
        model, engine = self.model, self.engine
        tp = engine.tensor_parallel_size or 1
        if tp > self.gpus:
            raise ValueError(
                f"engine.tensor_parallel_size: {tp} exceeds the study's gpus ({self.gpus})"
            )
        if engine.gpu_count > self.gpus:
            raise ValueError(
                f"engine.data_parallel_size: {engine.data_parallel_size} replicas of "
                f"{tp} GPU(s) each need {engine.gpu_count}; the study has gpus: {self.gpus}"
            )
        if model.num_attention_heads % tp:
            raise ValueError(
                f"engine.tensor_parallel_size: {tp} does not divide the model's "
                f"{model.num_attention_heads} attention heads"
            )
        max_len = engine.max_model_len
        if max_len is not None and max_len > model.max_position_embeddings:
            raise ValueError(
                f"engine.max_model_len: {max_len} exceeds the model's context "
                f"({model.max_position_embeddings} tokens)"
            )
        longest = self.workload.max_request_tokens()
        limit = max_len or model.max_position_embeddings
        if longest > limit:
            raise ValueError(
                f"workload: its longest request ({longest} tokens, prefix + prompt + output) "
                f"exceeds max_model_len ({limit}); the server would reject it"
            )
        return self
