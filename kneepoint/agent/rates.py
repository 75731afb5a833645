"""Which offered rates each phase of a tune measures, by the study's objective.

SLO capacity needs the full range around a configuration's knee (``validation_rates``).
Goodput at a fixed rate needs that rate and nothing else. Peak throughput needs rates well past
the knee, where the token rate holds its ceiling (the real Gemma-class 12B on an H100 held
~2,070 output tok/s flat from 16 to 32 req/s past a knee of ~8, issue "Step 7"): 2x and 4x
the incumbent's knee, both arms at the same rates, so that a challenger up to ~4x faster
saturates too (past the SLO is not past the ceiling: a server that misses its ITL limit at 2x
may still serve more tokens at 4x).
"""

from __future__ import annotations

from kneepoint.probes.sweep import validation_rates
from kneepoint.records.objective import GoodputAtRate, Objective, PeakThroughput

PAST_KNEE = (2.0, 4.0)


def repeat_rates(objective: Objective, knee_rps: float) -> list[float]:
    """The rates one configuration's repeats measure, its knee at ``knee_rps``."""
    if isinstance(objective, GoodputAtRate):
        return [objective.rate_rps]
    if isinstance(objective, PeakThroughput):
        return [knee_rps * f for f in PAST_KNEE]
    return validation_rates(knee_rps)


def validation_arms(
    objective: Objective, incumbent_knee_rps: float, challenger_knee_rps: float
) -> dict[str, list[float]]:
    """The rates each arm of a validation measures. For SLO capacity each arm around its own
    knee: a challenger twice as fast would otherwise spend half its points far below its knee,
    and the incumbent half of its far past its own."""
    if isinstance(objective, GoodputAtRate | PeakThroughput):
        rates = repeat_rates(objective, max(incumbent_knee_rps, challenger_knee_rps))
        return {"incumbent": rates, "challenger": rates}
    return {
        "incumbent": validation_rates(incumbent_knee_rps),
        "challenger": validation_rates(challenger_knee_rps),
    }


def climbs(objective: Objective) -> bool:
    """Whether a leg whose rates all met the SLO climbs on until one fails: SLO capacity
    interpolates the knee at the failure, and a peak measured where nothing failed was not
    the server's ceiling; goodput at a fixed rate needs that rate only."""
    return not isinstance(objective, GoodputAtRate)


def screens_knee(objective: Objective) -> bool:
    """Whether a screen searches the knee (SLO capacity) or looks at the objective's rates."""
    return not isinstance(objective, GoodputAtRate | PeakThroughput)
