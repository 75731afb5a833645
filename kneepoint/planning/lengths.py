"""How long a workload's requests are (shared prefix + prompt + output), as the memory plan
needs them: the median and p99 set the concurrency the KV pool holds, the longest request sets
the least ``max_model_len`` that rejects none of them.
"""

from __future__ import annotations

import math
import random

from kneepoint.load import sample_length
from kneepoint.records import PlanLengths, TraceEntry, Workload

DRAWS = 20_000
"""Requests drawn to read percentiles from: a p99 then rests on 200 requests past it."""
MAX_MODEL_LEN_STEP = 1024
"""A right-sized max_model_len is rounded up to this, a size people recognise in a flag."""


def request_lengths(
    workload: Workload, trace: tuple[TraceEntry, ...] = (), seed: int = 0
) -> PlanLengths:
    """Percentiles over ``DRAWS`` requests drawn from the workload (a trace's own requests)."""
    if trace:
        drawn = sorted(e.prefix_tokens + e.input_tokens + e.output_tokens for e in trace)
        longest = drawn[-1]
    else:
        drawn = sorted(_draws(workload, seed))
        longest = workload.max_request_tokens()
    p99 = drawn[min(len(drawn) - 1, math.ceil(0.99 * len(drawn)) - 1)]
    p99_round = _round_up(p99)
    over = sum(1 for n in drawn if n > p99_round) / len(drawn)
    return PlanLengths(
        p50_tokens=drawn[len(drawn) // 2],
        p99_tokens=p99,
        longest_tokens=longest,
        max_model_len=_round_up(longest),
        p99_max_model_len=p99_round,
        over_p99_share=over,
    )


def _draws(workload: Workload, seed: int) -> list[int]:
    rng = random.Random(seed)
    prefix = {g.name: g.prefix_tokens for g in workload.prefix_groups}
    classes = workload.classes
    picked = rng.choices(classes, weights=[c.weight for c in classes], k=DRAWS)
    return [
        prefix.get(c.prefix_group or "", 0)
        + sample_length(c.input_tokens, rng)
        + sample_length(c.output_tokens, rng)
        for c in picked
    ]


def _round_up(tokens: int) -> int:
    return math.ceil(tokens / MAX_MODEL_LEN_STEP) * MAX_MODEL_LEN_STEP
