"""The ceiling a move that grows the batch meets, read off the incumbent's own points.

A bigger KV pool, a higher memory fraction, fp8 KV, a higher running cap or prefix caching's
freed blocks all buy the same thing: more sequences in one step. Each step then takes longer,
as the server's own points showed (``ServerResponse``: step time grows as tokens^elasticity),
and a per-token latency limit (ITL or TPOT) caps how long a step may take. Where the
saturated point's per-token latency already sits near its limit, the batch cannot grow past
the step time that limit allows, and throughput grows only as that bigger step outruns its
own time. Priced from the resource it adds alone, a bigger pool on vLLM's CPU build read
2.50x and measured 0.88x: its steps already took most of what its ITL limit allowed
(tests/test_ceiling.py, the knee at its ITL limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

from kneepoint.policies.pruning.knob_effects import NOTHING_GAINED, Effect
from kneepoint.records import Constraint, LoadPoint, Observation

PER_TOKEN = ("itl", "tpot")
"""Limits a step's length sets: the gap between tokens, and the time per output token."""
GROWING = frozenset(
    {"kv_cache_memory_bytes", "gpu_memory_utilization", "kv_cache_dtype", "max_num_seqs"}
)  # fmt: skip
"""Knobs whose gain, moved up, is more sequences per step (KV room or a higher running cap).
Prefix caching is not among them: most of what it buys is prefill not computed again, work
cut per request, which shortens steps rather than growing them."""

LINE_SPREAD = math.log(1.25)
"""Least growth in tokens per step (log) the compute ceiling extrapolates a line from. Its
per-token cost is the step times' difference over the tokens', and two steps a few tokens apart
differ by less than a busy host's step noise: tests/fixtures/real/cpu-tiny-kv-narrow's 16 -> 18
tokens a step in 23.5 -> 26.5 ms read as 1.2 ms a token and capped a bigger pool at 1.16x that
measured 1.71x. The line of tests/fixtures/real/h100-llama8b-chat/kv-starved spans 75 -> 116
tokens (priced 2.14x, measured 1.94x)."""

RELIEVED_BY_ROOM: frozenset[Constraint] = frozenset({"cache", "scheduling"})
"""The walls a bigger batch relieves: room for sequences, and a cap on them."""


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most a batch-growing move can gain, and the reading that sets it."""

    ratio: float
    reading: str
    basis: str = ""
    """The step response the reading rests on (``ServerResponse.reading``)."""

    def words(self, said: str) -> str:
        """The reading, with its basis unless ``said`` already gives it."""
        return self.reading if self.basis in said else f"{self.reading} ({self.basis})"


def latency_ceiling(observation: Observation) -> Ceiling | None:
    """The capacity ratio at which the knee's steps (the highest rate that met the SLO, else
    the first that failed), grown along the server's measured step response, reach the
    tightest per-token limit of the classes served; None where the points show no step
    response or no class has a per-token limit. Below 1 where the point read already breaks
    it: a batch that grows there breaks it further."""
    response = observation.response
    if response is None or response.elasticity <= 0.0:
        return None
    point = observation.below or observation.saturated
    tightest = tightest_limit(point, slo_limits(observation))
    if tightest is None:
        return None
    label, seen_ms, limit_ms, _ = tightest
    # Steps grow by g**elasticity for g times the tokens; the tail a limit reads grows with
    # them, so the batch may grow until the seen tail reaches the limit, and throughput
    # grows by what that bigger step outruns of its own time.
    growth = (limit_ms / seen_ms) ** (1.0 / response.elasticity)
    ratio = response.batch_gain(growth) if growth >= 1.0 else growth
    reading = (
        f"{label} {seen_ms:.1f} ms at {point.rate_rps:.4g} req/s against its {limit_ms:g} ms "
        f"limit: steps may grow {growth:.2f}x before it breaks"
    )
    return Ceiling(round(ratio, 3), reading, response.reading())


def compute_ceiling(observation: Observation) -> Ceiling | None:
    """The most a bigger batch can raise throughput, whatever the limits: the server's two
    points read as steps costing a fixed time plus a time per token (the weights read once
    a step, the work done per token) serve at most one token per per-token time, however
    many sequences a step carries. None where the points do not bound it: steps that did not
    grow (a bigger batch costs nothing more), or grew faster than their tokens (no fixed
    cost: the step response's power law already prices any growth at nothing), or where
    as many sequences ran in both: a line through two steps that differ only in their mix
    says nothing of a bigger batch (tests/fixtures/real/cpu-tiny-kv-pinned: 3 sequences in
    both, 14 -> 20 tokens a step, priced a bigger pool at 1.01x that measured 1.9-2.99x), or
    where the tokens per step grew too little to draw a line through (``LINE_SPREAD``)."""
    response = observation.response
    if response is None or not response.batch_grew():
        return None
    if math.log(response.high_tokens_per_step / response.low_tokens_per_step) < LINE_SPREAD:
        return None
    grown = response.high_tokens_per_step - response.low_tokens_per_step
    per_token_ms = (response.high_step_ms - response.low_step_ms) / grown
    fixed_ms = response.high_step_ms - per_token_ms * response.high_tokens_per_step
    if per_token_ms <= 0.0 or fixed_ms <= 0.0:
        return None
    ratio = 1.0 + fixed_ms / (per_token_ms * response.high_tokens_per_step)
    reading = (
        f"steps cost {fixed_ms:.1f} ms plus {per_token_ms * 1e3:.0f} us a token: any batch "
        f"serves at most {ratio:.2f}x the tokens per second"
    )
    return Ceiling(round(ratio, 3), reading, response.reading())


def bound_growth(
    knob: str, effect: Effect, observation: Observation, relieves: Constraint
) -> Effect | str:
    """A move of ``knob`` that grows the batch, capped by the lower of the latency and the
    compute ceilings; the reason it is ruled out where the cap leaves nothing to gain. Only
    where it relieves the cache or the scheduler: against bandwidth, fp8 KV's gain is shorter
    steps (half the KV bytes read), not more of them."""
    if knob not in GROWING or effect.direction == "down" or relieves not in RELIEVED_BY_ROOM:
        return effect
    found = [c for c in (latency_ceiling(observation), compute_ceiling(observation)) if c]
    ceiling = min(found, key=lambda c: c.ratio, default=None)
    if ceiling is None or ceiling.ratio >= effect.ratio:
        return effect
    if ceiling.ratio < NOTHING_GAINED:
        return (
            f"{effect.reason}; but a bigger batch is priced at {ceiling.ratio:.2f}x: "
            f"{ceiling.words(effect.reason)}"
        )
    reason = f"{effect.reason}; capped at {ceiling.ratio:.2f}x from {effect.ratio:.2f}x: "
    return replace(effect, ratio=ceiling.ratio, reason=reason + ceiling.words(effect.reason))


def slo_limits(observation: Observation) -> dict[str, dict[tuple[str, int], float]]:
    """Each class the saturated point served, with its per-token limits (ITL, TPOT)."""
    slo = observation.slo
    found: dict[str, dict[tuple[str, int], float]] = {}
    if slo is None:
        return found
    for name in observation.saturated.dists:
        limits = slo.for_class(name)
        if limits is None:
            continue
        per_token = {k: v for k, v in limits.limits_ms().items() if k[0] in PER_TOKEN}
        if per_token:
            found[name] = per_token
    return found


class Tail(NamedTuple):
    """A per-token tail against its limit at one load point."""

    label: str
    """"class metric pNN", as the reasons print it."""
    seen_ms: float
    limit_ms: float
    percentile: int


def tightest_limit(
    point: LoadPoint, limits: dict[str, dict[tuple[str, int], float]]
) -> Tail | None:
    """The per-token tail whose seen value is closest to its limit."""
    best: Tail | None = None
    for name, per_token in limits.items():
        for (metric, pct), limit_ms in per_token.items():
            dist = point.dists.get(name, {}).get(metric)
            if dist is None or not 0.0 < dist.at(pct) < float("inf"):
                continue
            seen = dist.at(pct)
            if best is None or seen / limit_ms > best.seen_ms / best.limit_ms:
                best = Tail(f"{name} {metric} p{pct}", seen, limit_ms, pct)
    return best
