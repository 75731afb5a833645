"""What a tuning study maximises.

``slo_capacity`` (the default) is the highest offered request rate at which every traffic class
still meets its SLO: past the knee, extra tokens cost far more waiting than they are worth, so
peak throughput is the wrong target for a latency-sensitive service.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kneepoint.records.base import InputRecord
from kneepoint.records.limits import MAX_RATE_RPS


class SloCapacity(InputRecord):
    """Maximise the highest offered rate (requests/s) at which all classes meet their SLOs."""

    kind: Literal["slo_capacity"] = "slo_capacity"
    per_gpu: bool = False
    """Divide by the configuration's GPUs (its tensor-parallel size): what a study with more
    than one GPU compares, since a wider server costs more GPUs (the default there)."""


class GoodputAtRate(InputRecord):
    """Maximise good requests per second at one fixed offered rate."""

    kind: Literal["goodput_at_rate"] = "goodput_at_rate"
    rate_rps: float = Field(gt=0.0, le=MAX_RATE_RPS)


class PeakThroughput(InputRecord):
    """Maximise saturated throughput, ignoring latency (batch and offline jobs)."""

    kind: Literal["peak_throughput"] = "peak_throughput"
    tokens: Literal["output", "total"] = "output"
    """Count generated tokens only, or prompt plus generated tokens."""
    per_gpu: bool = False
    """As for SLO capacity: tokens per second per GPU."""


Objective = Annotated[
    SloCapacity | GoodputAtRate | PeakThroughput,
    Field(discriminator="kind"),
]
