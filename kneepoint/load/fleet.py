"""A fleet sized from a configuration's measured SLO capacity: the replicas and GPUs a peak
rate needs, what they cost an hour, what a million output tokens costs, and how busy the
fleet runs on average.

The capacity is the lower end of its interval: a fleet sized on the point estimate misses its
SLO whenever the estimate was lucky. Replicas carry the peak at ``1 - headroom`` of their
capacity; tokens are paid for at the average rate, ``peak / peak_to_average``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from kneepoint.records import (
    FleetSpec,
    GpuSpec,
    StudySpec,
    SweepResult,
    Workload,
    mean_length_tokens,
)


@dataclass(frozen=True, slots=True)
class FleetSize:
    """One configuration's fleet for ``FleetSpec.peak_rps`` (replica figures without it)."""

    capacity_rps: float
    """SLO capacity of one replica, the lower end of its interval."""
    gpus_per_replica: int
    replicas: int | None
    """None without a peak rate to carry."""
    usd_per_hour: float | None
    """The fleet's (one replica's without a peak rate); None without a price."""
    usd_per_million_output: float | None
    """At the average rate (one replica at ``1 - headroom`` of capacity without a peak)."""
    utilisation: float
    """Average offered rate over the fleet's SLO capacity."""

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.gpus_per_replica


def size_fleet(
    capacity_rps: float,
    gpus_per_replica: int,
    output_tokens_per_request: float,
    fleet: FleetSpec,
    usd_per_gpu_hour: float | None,
) -> FleetSize:
    """Size a fleet of replicas that each hold ``capacity_rps`` within the SLO."""
    if capacity_rps <= 0 or gpus_per_replica < 1 or output_tokens_per_request <= 0:
        raise ValueError("a fleet needs a positive capacity, GPUs and output per request")
    usable = capacity_rps * (1.0 - fleet.headroom)
    if fleet.peak_rps is None:
        replicas, average = None, usable
    else:
        replicas = max(1, math.ceil(fleet.peak_rps / usable - 1e-9))
        average = fleet.peak_rps / fleet.peak_to_average
    serving = replicas or 1
    per_hour = None if usd_per_gpu_hour is None else usd_per_gpu_hour * gpus_per_replica * serving
    tokens_per_hour = average * output_tokens_per_request * 3600.0
    return FleetSize(
        capacity_rps=capacity_rps,
        gpus_per_replica=gpus_per_replica,
        replicas=replicas,
        usd_per_hour=per_hour,
        usd_per_million_output=None if per_hour is None else per_hour / tokens_per_hour * 1e6,
        utilisation=average / (capacity_rps * serving),
    )


def output_per_request(result: SweepResult, workload: Workload) -> float:
    """Output tokens per request: the workload's mean where the client asks the server to
    ignore EOS (every answer is as long as asked), else as the server delivered them at the
    rates that met the SLO (a model stops early), read off its output and completion rates."""
    measured = [
        p.point.output_tokens_per_s / p.point.achieved_rps
        for p in result.points
        if p.counted
        and p.point.meets_slo
        and p.point.output_tokens_per_s
        and p.point.achieved_rps > 0
    ]
    if measured and not workload.client.ignore_eos:
        return statistics.fmean(measured)
    total = sum(c.weight for c in workload.classes)
    return sum(c.weight * mean_length_tokens(c.output_tokens) for c in workload.classes) / total


def gpu_price(study: StudySpec, gpu: GpuSpec, prices: Mapping[str, float]) -> float | None:
    """A GPU-hour: a price given for this GPU, else the study's own for its GPU, else the
    catalogue's typical price."""
    if gpu.name in prices:
        return prices[gpu.name]
    own = study.budget.price_per_gpu_hour_usd
    if gpu.name == study.gpu.name and own is not None:
        return own
    return gpu.usd_per_hour
