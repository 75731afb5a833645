"""Rules for the knobs that shape the batch one engine step takes: how many sequences
(``max_num_seqs``), how many tokens (``max_num_batched_tokens``) and how much of one long
prompt (``long_prefill_token_threshold``). A bigger batch pays only where the server's own
points say a bigger step outruns its step time (``ServerResponse``)."""

from __future__ import annotations

from collections.abc import Callable

from kneepoint.policies.diagnosis import (
    PREEMPTIONS_PER_REQUEST,
    cap_pinned,
    preemptions_per_request,
)
from kneepoint.policies.pruning.ceiling import Tail, compute_ceiling, slo_limits, tightest_limit
from kneepoint.policies.pruning.knob_effects import NOTHING_GAINED, Effect, Rule, Situation, damped
from kneepoint.policies.pruning.prefill_load import steps_over_share
from kneepoint.records import Observation


def seqs(sit: Situation) -> Effect | str:
    current = sit.engine.max_num_seqs
    signals = sit.observation.saturated.signals
    if sit.binding == "cache":
        per_request = preemptions_per_request(sit.observation.saturated)
        if per_request < PREEMPTIONS_PER_REQUEST:
            return (
                f"{per_request:.2f} preemptions per completed request: no sequences evict "
                "each other, so admission control has nothing to save"
            )
        reason = (
            f"{per_request:.2f} preemptions per completed request: admission control (fewer "
            f"than {current} sequences at once) leaves each more KV room, so long answers stop "
            "evicting each other and being recomputed, at some cost in batch size"
        )
        return Effect("down", 1.05, reason)
    if sit.binding == "scheduling" and cap_pinned(signals, current):
        return _raise_cap(sit, current)
    return f"running is not pinned at max_num_seqs ({current}): the cap is not what binds"


def _raise_cap(sit: Situation, current: int) -> Effect | str:
    """Doubling the cap, as far as the KV pool has room, priced by the server's measured
    response where it has one: throughput grows only as much as a bigger step outruns its
    own step time."""
    kv = sit.observation.saturated.signals.kv_usage_mean or 0.0
    growth = min(2.0, 0.9 / kv) if kv > 0 else 2.0
    response = sit.observation.response
    if response is None:
        reason = (
            f"running is pinned at max_num_seqs {current} while KV is {kv:.0%} used: a "
            "higher cap admits the waiting requests"
        )
        return Effect("up", damped(max(1.2, growth)), reason)
    ratio = response.batch_gain(max(1.0, growth))
    priced = (
        f"{growth:.2f}x the batch would serve {ratio:.2f}x the tokens per second "
        f"({response.reading()})"
    )
    if ratio < NOTHING_GAINED:
        return f"raising max_num_seqs {current} is predicted at {ratio:.2f}x: {priced}"
    return Effect("up", ratio, f"a higher cap admits the waiting requests: {priced}")


def token_budget(sit: Situation) -> Effect | str:
    current = sit.engine.max_num_batched_tokens
    if sit.diagnosis.scheduling_kind == "prefill_interference":
        reason = f"chunks smaller than {current} tokens interleave prefills with decodes"
        return Effect("down", 1.1, reason + ": ITL tails shrink")
    tokens = sit.observation.saturated.signals.tokens_per_step_mean or 0.0
    if tokens < 0.9 * current:
        return _chunk_tail(sit, current, tokens)
    reason = f"steps run full at {current} tokens: a larger budget amortises per-step overhead"
    response = sit.observation.response
    if response is None:
        return Effect("up", 1.08, reason)
    # A full budget binds only where bigger steps buy throughput (see ServerResponse).
    ratio = response.batch_gain(2.0)
    priced = f"twice the tokens per step would serve {ratio:.2f}x ({response.reading()})"
    if ratio < NOTHING_GAINED:
        return f"doubling it is predicted at {ratio:.2f}x: {priced}"
    # Damped: bigger chunks also lengthen the steps decodes wait on (ITL), a share of the gain.
    return Effect("up", damped(ratio), f"{reason}: {priced}")


TAIL_AT_LIMIT = 0.95
"""A per-token tail this close to its limit at the first failing rate binds as surely as one
past it: the next rate breaks it. On benchmarks/regret.py's quickstart grid with fp8 weights
chat's ITL p95 reads 49.2-49.7 ms of 50 at the failing 46 req/s (TTFT fails first), and
1,024-token chunks then measure 46.48 against 44.59 req/s."""


def _chunk_tail(sit: Situation, current: int, tokens: float) -> Effect | str:
    """A smaller chunk budget, priced from the tail that failed: where the mean step leaves
    the budget unfilled, the steps that carry a full prefill chunk are the longest ones, and
    they set a per-token tail (ITL, TPOT). Halved, they shorten along the server's step
    response; if the tail the knee failed on then fits its limit, the failing rate can pass.
    The mean step alone would rule it out: on benchmarks/regret.py's quickstart grid steps
    carry 594 of 2048 budget tokens while chat's ITL p95 fails, and 512 measures +9%."""
    unfilled = f"steps carry {tokens:.0f} of {current} budget tokens: the budget is not full"
    observation = sit.observation
    failing, below = observation.saturated, observation.below
    tight = tightest_limit(failing, slo_limits(observation))
    if tight is None or tight[1] < TAIL_AT_LIMIT * tight[2] or below is None:
        return f"{unfilled}, and no per-token tail reached its limit at the knee"
    if current / 2 < 1.5 * tokens:
        return f"{unfilled}, but half of it would cut into the mean step"
    few = _few_full_steps(observation, current // 2, tight)
    if few is not None:
        return f"{unfilled}, and {few}"
    response = observation.response
    elasticity = response.elasticity if response is not None else 1.0
    label, seen_ms, limit_ms, _ = tight
    shortened_ms = seen_ms * 0.5**elasticity
    if shortened_ms > limit_ms:
        return (
            f"{unfilled}; {label} {seen_ms:.1f} ms at {failing.rate_rps:.4g} req/s would "
            f"still break its {limit_ms:g} ms limit with half-sized chunks ({shortened_ms:.1f} ms)"
        )
    room, room_reading = _room_past(observation, shortened_ms, limit_ms)
    ratio = damped(failing.rate_rps / below.rate_rps) * room
    reason = (
        f"{unfilled}, but the steps carrying a full {current}-token prefill chunk set "
        f"{label}, {seen_ms:.1f} ms at {failing.rate_rps:.4g} req/s against its {limit_ms:g} "
        f"ms limit ({seen_ms / limit_ms:.0%} of it): half-sized chunks would bring it to "
        f"~{shortened_ms:.1f} ms (step time grows as tokens^{elasticity:.2f}), letting "
        f"{failing.rate_rps:.4g} req/s pass{room_reading}"
    )
    return Effect("down", ratio, reason)


def _few_full_steps(observation: Observation, half: int, tail: Tail) -> str | None:
    """Why half the budget would leave the tail as it is: fewer of the failing point's steps
    had more than ``half`` prompt tokens arriving than the tail's share of its gaps
    (``kneepoint.policies.pruning.prefill_load``); None where enough did, or where the
    workload or the engine's step rate is unknown."""
    failing, workload = observation.saturated, observation.workload
    steps_per_s = failing.signals.steps_per_s
    if workload is None or not steps_per_s:
        return None
    arrivals = failing.rate_rps / steps_per_s
    share = steps_over_share(workload, arrivals, half)
    tail_share = 1.0 - tail.percentile / 100.0
    if share >= tail_share:
        return None
    return (
        f"at {failing.rate_rps:.4g} req/s ({arrivals:.2f} arrivals a step) {share:.1%} of "
        f"steps have more than {half} prompt tokens to prefill, fewer than the "
        f"{tail_share:.0%} of gaps {tail.label} reads: half-sized chunks leave it as it is"
    )


def _room_past(observation: Observation, shortened_ms: float, limit_ms: float) -> tuple[float, str]:
    """How much more than the failing rate half-sized chunks serve: with the full-chunk
    steps no longer setting the tail, the batch may grow until the shortened tail reaches
    its limit, and throughput grows as that bigger step outruns its own time (the latency
    ceiling's reading), no further than the compute ceiling. Priced at the failing rate alone,
    the move reads too little to be tried: 1.03x for 2048 -> 512 on benchmarks/regret.py's
    agentic grid, where it measures 1.16x."""
    response = observation.response
    if response is None or response.elasticity <= 0.0 or shortened_ms <= 0.0:
        return 1.0, ""
    growth = (limit_ms / shortened_ms) ** (1.0 / response.elasticity)
    gain = response.batch_gain(growth)
    words = f"; past it steps may grow {growth:.2f}x before the tail breaks again ({gain:.2f}x"
    ceiling = compute_ceiling(observation)
    if ceiling is not None and ceiling.ratio < gain:
        gain, words = ceiling.ratio, f"{words}, capped at {ceiling.ratio:.2f}x: {ceiling.reading}"
    return max(1.0, gain), f"{words})"


def failed_tail(sit: Situation) -> Effect | None:
    """The chunk budget's move where the knee failed on a per-token tail its full-chunk steps
    set, whatever binds: the tail that failed is the SLO's own reading, not a share of GPU
    time, and half-sized chunks mend it directly. benchmarks/regret.py's agentic quickstart
    reads bandwidth-bound while its ITL p95 fails from steps carrying a 2,048-token chunk;
    512-token chunks measure 1.16x there."""
    current = sit.engine.max_num_batched_tokens
    tokens = sit.observation.saturated.signals.tokens_per_step_mean or 0.0
    if tokens >= 0.9 * current:
        return None
    found = _chunk_tail(sit, current, tokens)
    return found if isinstance(found, Effect) else None


def prefill_cap(sit: Situation) -> Effect | str:
    if sit.diagnosis.scheduling_kind != "prefill_interference":
        return "no prefill interference (ITL tails are not what fails)"
    reason = "capping one request's prefill tokens per step keeps long prompts from stalling"
    return Effect("down", 1.1, reason + " running decodes")


TAIL_RULES: dict[str, Callable[[Situation], Effect | None]] = {
    "max_num_batched_tokens": failed_tail,
}
"""Moves priced from the limit the knee failed on, tried whatever constraint binds."""

BATCH_RULES: dict[str, Rule] = {
    "max_num_seqs": seqs,
    "max_num_batched_tokens": token_budget,
    "long_prefill_token_threshold": prefill_cap,
}
