"""The study's objective read off a sweep: its value in each repeat, and their mean.

- ``slo_capacity``: the SLO capacity each repeat interpolates (``kneepoint.load.capacity``).
- ``goodput_at_rate``: the goodput measured at the study's fixed offered rate (the point
  within 3% of it): good requests per second, failures and misses counted against it.
- ``peak_throughput``: the highest token rate any valid point of the repeat served (output
  tokens, or prompt plus output), measured at the client over the stable window; for older
  recordings without it, vLLM's own generation counter. Latency is reported beside it, not
  optimised.
"""

from __future__ import annotations

import statistics

from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.objective import GoodputAtRate, Objective, PeakThroughput
from kneepoint.records.sweep import SweepPoint, SweepResult

AT_RATE_TOLERANCE = 0.03
"""How near a point's offered rate must be to the fixed rate to count as measured at it."""


def name(objective: Objective) -> str:
    if isinstance(objective, GoodputAtRate):
        return f"goodput at {objective.rate_rps:g} req/s"
    if isinstance(objective, PeakThroughput):
        return f"peak {objective.tokens} throughput"
    return "SLO capacity"


def unit(objective: Objective) -> str:
    if isinstance(objective, GoodputAtRate):
        return "good req/s"
    per = " per GPU" if objective.per_gpu else ""
    if isinstance(objective, PeakThroughput):
        return f"{objective.tokens} tok/s{per}"
    return f"req/s{per}"


def gpus(result: SweepResult, objective: Objective) -> int:
    """What a per-GPU objective divides a sweep's value by."""
    return width(result.config, objective)


def width(config: EngineConfig, objective: Objective) -> int:
    """The GPUs a per-GPU objective counts for ``config`` (its tensor-parallel size); 1
    for an objective per server."""
    if isinstance(objective, GoodputAtRate) or not objective.per_gpu:
        return 1
    return config.tensor_parallel_size or 1


def tokens_per_s(point: LoadPoint, objective: PeakThroughput) -> float | None:
    """The token rate a point served, as ``objective`` counts tokens."""
    output = point.output_tokens_per_s
    if output is None:
        output = point.signals.generation_tokens_per_s
    if output is None or objective.tokens == "output":
        return output
    prompt = point.prompt_tokens_per_s
    return None if prompt is None else output + prompt


def point_value(point: SweepPoint, objective: Objective) -> float | None:
    """What one point says of the objective (None for SLO capacity, which needs a sweep)."""
    if isinstance(objective, GoodputAtRate):
        near = abs(point.rate_rps - objective.rate_rps) <= AT_RATE_TOLERANCE * objective.rate_rps
        return point.point.goodput_rps if near and point.counted else None
    if isinstance(objective, PeakThroughput):
        return tokens_per_s(point.point, objective) if point.counted else None
    return None


def by_repeat(result: SweepResult, objective: Objective) -> tuple[float, ...]:
    """The objective's value in each repeat that measured it."""
    if not isinstance(objective, GoodputAtRate | PeakThroughput):
        return tuple(c / gpus(result, objective) for c in result.capacity_by_repeat)
    values = []
    for repeat in sorted({p.repeat for p in result.points}):
        found = [
            v
            for p in result.points
            if p.repeat == repeat and (v := point_value(p, objective)) is not None
        ]
        if found:
            values.append(max(found) if isinstance(objective, PeakThroughput) else found[0])
    return tuple(v / gpus(result, objective) for v in values)


def value(result: SweepResult, objective: Objective) -> float | None:
    """The objective's mean over repeats (None when no repeat measured it)."""
    if not isinstance(objective, GoodputAtRate | PeakThroughput):
        capacity = result.capacity_rps
        return None if capacity is None else capacity / gpus(result, objective)
    values = by_repeat(result, objective)
    return statistics.fmean(values) if values else None


def noise_rel(result: SweepResult, objective: Objective) -> float:
    """Run-to-run relative standard deviation of a configuration's objective."""
    values = by_repeat(result, objective)
    mean = statistics.fmean(values) if values else 0.0
    return statistics.stdev(values) / mean if len(values) > 1 and mean > 0 else 0.0
