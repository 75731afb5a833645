"""How much prompt an engine step has to prefill at a given rate: the share of steps whose
newly arrived prompts exceed a token count, for the workload's own lengths.

A chunk budget caps the prompt tokens one step takes, summed over every prompt that arrived
in it, so a smaller budget shortens only the steps that would have carried more than it
(the bandwidth-bound case in benchmarks/README.md, regret.py's section). The count is arrivals
per step, Poisson, each with its class's prompt (its shared prefix included, as a first
sight of a document prefills it all).
"""

from __future__ import annotations

import math
import random

from kneepoint.load import sample_length
from kneepoint.records import Workload

DRAWS = 4000
"""Steps drawn: the share's standard error stays under 0.4 points at the 5% a p95 reads."""


def steps_over_share(workload: Workload, arrivals_per_step: float, tokens: int) -> float:
    """The share of steps whose arriving prompts sum to more than ``tokens``
    (``arrivals_per_step``: the offered rate over the engine's steps per second). Seeded, so
    one observation always prices the same."""
    rng = random.Random(0)
    classes = workload.classes
    weights = [c.weight for c in classes]
    prefix = {g.name: g.prefix_tokens for g in workload.prefix_groups}
    over = 0
    for _ in range(DRAWS):
        total = 0
        for _ in range(_poisson(arrivals_per_step, rng)):
            cls = rng.choices(classes, weights=weights)[0]
            own = sample_length(cls.input_tokens, rng)
            total += own + prefix.get(cls.prefix_group or "", 0)
        over += total > tokens
    return over / DRAWS


def _poisson(mean: float, rng: random.Random) -> int:
    """One Poisson draw by inversion (means of a few arrivals a step)."""
    k, p, cumulative, u = 0, math.exp(-mean), math.exp(-mean), rng.random()
    while u > cumulative and k < 1000:
        k += 1
        p *= mean / k
        cumulative += p
    return k
