"""Service-level objectives: per traffic class, latency limits at named percentiles.

A limit ``ttft_p99_ms: 500`` means: over the stable window of a load point, the 99th percentile
of this class's time to first token (counted from the scheduled send time) must be at most
500 ms. Failed and timed-out requests count as infinitely slow. A request is *good* (counts
towards goodput) only if its own values meet every limit of its class.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from kneepoint.records.base import InputRecord

METRICS = ("ttft", "itl", "tpot", "e2e")
PERCENTILES = (50, 90, 95, 99)

_Limit = Field(default=None, gt=0.0)


class ClassSlo(InputRecord):
    """Latency limits for one traffic class, in milliseconds; unset limits do not apply.

    ttft: scheduled send to first token. itl: gap between token-carrying chunks.
    tpot: (last token - first token) / (output tokens - 1). e2e: scheduled send to last byte.
    """

    ttft_p50_ms: float | None = _Limit
    ttft_p90_ms: float | None = _Limit
    ttft_p95_ms: float | None = _Limit
    ttft_p99_ms: float | None = _Limit
    itl_p50_ms: float | None = _Limit
    itl_p90_ms: float | None = _Limit
    itl_p95_ms: float | None = _Limit
    itl_p99_ms: float | None = _Limit
    tpot_p50_ms: float | None = _Limit
    tpot_p90_ms: float | None = _Limit
    tpot_p95_ms: float | None = _Limit
    tpot_p99_ms: float | None = _Limit
    e2e_p50_ms: float | None = _Limit
    e2e_p90_ms: float | None = _Limit
    e2e_p95_ms: float | None = _Limit
    e2e_p99_ms: float | None = _Limit

    @model_validator(mode="after")
    def _at_least_one(self) -> ClassSlo:
        if not self.limits_ms():
            raise ValueError("an SLO needs at least one limit, e.g. ttft_p99_ms")
        return self

    @model_serializer(mode="wrap")
    def _only_set_limits(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Sixteen mostly-unset limits would bury the two that matter in a resolved study.
        return {k: v for k, v in handler(self).items() if v is not None}

    def limits_ms(self) -> dict[tuple[str, int], float]:
        """The set limits as ``{(metric, percentile): milliseconds}``."""
        found: dict[tuple[str, int], float] = {}
        for metric in METRICS:
            for pct in PERCENTILES:
                value = getattr(self, f"{metric}_p{pct}_ms")
                if value is not None:
                    found[(metric, pct)] = value
        return found


GoodputRule = Literal["every_limit", "vllm"]


class Slo(InputRecord):
    """SLOs by traffic class name; ``default`` applies to classes not listed."""

    classes: dict[str, ClassSlo] = Field(default_factory=dict)
    default: ClassSlo | None = None
    goodput_rule: GoodputRule = "every_limit"
    """Which requests goodput counts. ``every_limit``: completed and within every limit on
    its own, its own p95 gap between tokens included (one stall fails a short answer).
    ``vllm``: as ``vllm bench serve --goodput`` counts, its TTFT, its mean time per output
    token and its end-to-end latency against the limits; an ITL limit is held against the
    mean TPOT. The SLO verdict (percentiles over the window) is the same under either."""

    @model_validator(mode="after")
    def _not_empty(self) -> Slo:
        if not self.classes and self.default is None:
            raise ValueError("give SLOs under 'classes' or a 'default'")
        return self

    def for_class(self, name: str) -> ClassSlo | None:
        return self.classes.get(name, self.default)
