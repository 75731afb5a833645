"""Prices bounded by what the server showed: a move that grows the batch (a bigger KV pool, a
higher running cap) is capped where the incumbent's own steps, grown along their measured
response, would break a per-token latency limit, and priced below 1 where they already do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kneepoint.calibration.recorded import find_recorded
from kneepoint.config.catalog import knob_catalogue
from kneepoint.load.objective import rules
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.ceiling import compute_ceiling, latency_ceiling
from kneepoint.policies.pruning.prune import prune
from kneepoint.policies.search.pruned_space import ShortOfRate, in_objective_terms
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.diagnosis import Diagnosis, Observation, ServerResponse
from kneepoint.records.engine import EngineConfig
from kneepoint.records.objective import GoodputAtRate, SloCapacity
from kneepoint.records.proposal import Pruning
from kneepoint.records.slo import Slo
from kneepoint.records.workload import Workload
from tests.conftest import REPO
from tests.support.pruned import CHAT
from tests.support.readings import A100, CACHE, LLAMA_1B, point

POOL = {"kv_cache_memory_bytes": 2**30, "max_model_len": 32768}


def _response(elasticity: float) -> ServerResponse:
    return ServerResponse(low_rate_rps=8.0, high_rate_rps=10.0, low_tokens_per_step=40.0,
                          high_tokens_per_step=73.0, low_step_ms=2.0, high_step_ms=3.8,
                          elasticity=elasticity, low_running=20.0, high_running=36.0)  # fmt: skip


def _observe(itl_p95_ms: float, slo: dict[str, Any] | None, elasticity: float = 0.9,
             *, below: bool = True) -> Observation:  # fmt: skip
    knee = point(CACHE, violations=(), itl=(itl_p95_ms / 1.5, itl_p95_ms)) if below else None
    return Observation(
        saturated=point(CACHE), below=knee, response=_response(elasticity), gpu=A100,
        model=LLAMA_1B, engine=EngineConfig(model=LLAMA_1B.name, **POOL), workload=CHAT,
        slo=None if slo is None else Slo.model_validate({"default": slo}),
    )  # fmt: skip


def _prune(observation: Observation) -> Pruning:
    diagnosis = Diagnosis(binding="cache", confidence=0.9)
    return prune(diagnosis, context_of(observation), knob_catalogue())


def _kv(found: Pruning) -> str | float:
    """The KV pool move's price, or why it was ruled out."""
    for c in found.candidates:
        if c.knob.name == "kv_cache_memory_bytes":
            return c.predicted_ratio
    return next(r.reason for r in found.ruled_out if r.knob == "kv_cache_memory_bytes")


def test_without_a_per_token_limit_nothing_caps_the_pool() -> None:
    free = _kv(_prune(_observe(45.0, {"ttft_p99_ms": 1000})))
    assert isinstance(free, float) and free > 1.5
    assert latency_ceiling(_observe(45.0, {"ttft_p99_ms": 1000})) is None
    assert latency_ceiling(_observe(45.0, None)) is None


def test_a_limit_with_headroom_caps_the_pool_at_what_its_steps_allow() -> None:
    # ITL p95 at 60% of its limit, steps growing as tokens^0.5: the batch may grow
    # (1 / 0.6)^2 = 2.78x, which serves 2.78^0.5 = 1.67x the tokens per second.
    observation = _observe(30.0, {"ttft_p99_ms": 1000, "itl_p95_ms": 50}, elasticity=0.5)
    ceiling = latency_ceiling(observation)
    assert ceiling is not None and abs(ceiling.ratio - 1.667) < 0.01
    assert "c itl p95 30.0 ms at 10 req/s against its 50 ms limit" in ceiling.reading
    found = _prune(observation)
    move = next(c for c in found.candidates if c.knob.name == "kv_cache_memory_bytes")
    assert move.predicted_ratio == ceiling.ratio
    assert "capped at 1.67x" in move.reason and "tokens^0.50" in move.reason


def test_a_knee_at_its_itl_limit_rules_the_pool_out() -> None:
    # The CPU build's case (issue "Step 16": 2.50x predicted, 0.88x measured): the knee's
    # steps already take nearly what the ITL limit allows and grow almost as fast as the batch.
    observation = _observe(285.0, {"ttft_p99_ms": 5000, "itl_p95_ms": 300})
    ceiling = latency_ceiling(observation)
    assert ceiling is not None and ceiling.ratio < 1.02
    reason = _kv(_prune(observation))
    assert isinstance(reason, str) and "a bigger batch is priced at 1.01x" in reason


def test_steps_that_already_break_the_limit_price_a_bigger_batch_below_one() -> None:
    # No rate met the SLO: the first failing point's ITL p95 (1.5 x its 3.8 ms step) is over
    # the 5 ms limit.
    observation = _observe(0.0, {"itl_p95_ms": 5}, below=False)
    ceiling = latency_ceiling(observation)
    assert ceiling is not None and ceiling.ratio < 1.0


def test_a_move_that_shrinks_the_batch_is_not_capped() -> None:
    observation = _observe(285.0, {"ttft_p99_ms": 5000, "itl_p95_ms": 300})
    found = _prune(observation)
    seqs = [c for c in found.candidates if c.knob.name == "max_num_seqs"]
    assert all(c.direction == "down" and "capped" not in c.reason for c in seqs)


def test_fp8_kv_against_bandwidth_is_not_capped_as_a_bigger_batch() -> None:
    # Against bandwidth fp8 KV's gain is half the KV bytes read per step, not more sequences
    # (a held-out A100 case re-priced kv fp8 to 1.05x that a sweep measured at +7.3%).
    observation = _observe(285.0, {"ttft_p99_ms": 5000, "itl_p95_ms": 300})
    diagnosis = Diagnosis(binding="bandwidth", confidence=0.9)
    found = prune(diagnosis, context_of(observation), knob_catalogue())
    kv_fp8 = [c for c in found.candidates if c.knob.name == "kv_cache_dtype"]
    assert kv_fp8 and "capped" not in kv_fp8[0].reason


def _chunked(
    itl_p95_ms: float, elasticity: float = 0.84, *, steps_per_s: float = 3.5,
    workload: Workload = CHAT,
) -> Observation:  # fmt: skip
    """The quickstart's knee (issue "Step 16"): steps carry 574 of a 2,048-token budget on
    average, and the first failing rate (10 req/s; the knee 9.2) reads chat's ITL p95. Its
    200-token prompts at 10 req/s over 3.5 steps a second are the 574 tokens a step."""
    signals = {**CACHE, "tokens_per_step_mean": 574.0, "kv_usage_mean": 0.3,
               "steps_per_s": steps_per_s}  # fmt: skip
    failing = point(signals, itl=(itl_p95_ms / 1.5, itl_p95_ms))
    knee = point(signals, violations=(), itl=(20.0, 30.0)).model_copy(update={"rate_rps": 9.2})
    return Observation(
        saturated=failing, below=knee, response=_response(elasticity), gpu=A100, model=LLAMA_1B,
        engine=EngineConfig(model=LLAMA_1B.name, max_num_batched_tokens=2048, **POOL),
        workload=workload,
        slo=Slo.model_validate({"default": {"ttft_p99_ms": 1000, "itl_p95_ms": 50}}),
    )  # fmt: skip


def _budget(found: Pruning) -> str | float:
    for c in found.candidates:
        if c.knob.name == "max_num_batched_tokens":
            assert c.direction == "down"
            return c.predicted_ratio
    return next(r.reason for r in found.ruled_out if r.knob == "max_num_batched_tokens")


def _prune_compute(observation: Observation) -> Pruning:
    return prune(Diagnosis(binding="compute", confidence=0.9), context_of(observation),
                 knob_catalogue())  # fmt: skip


def test_the_chunk_budget_is_priced_from_the_tail_its_full_steps_set() -> None:
    """An unfilled budget on average ruled the knob out ("steps carry 594 of 2048 budget
    tokens"), while the full-chunk steps set the ITL tail that failed; 2048 -> 512 measured
    +9% on the quickstart. Halved chunks bring 53.5 ms to 53.5 x 0.5^0.84 = 29.9 ms."""
    found = _prune_compute(_chunked(53.5))
    price = _budget(found)
    assert isinstance(price, float) and price > 1.02
    move = next(c for c in found.candidates if c.knob.name == "max_num_batched_tokens")
    assert "the steps carrying a full 2048-token prefill chunk set c itl p95, 53.5 ms" in (
        move.reason
    )
    assert "~29.9 ms" in move.reason


LONGFORM = Workload.model_validate({
    "name": "longform",
    "classes": [{"name": "c",
                 "input_tokens": {"kind": "lognormal", "median_tokens": 512, "sigma": 0.5,
                                  "min_tokens": 64, "max_tokens": 2048},
                 "output_tokens": {"kind": "fixed", "tokens": 768}}],
})  # fmt: skip
"""The simulator's bandwidth-bound scenario's prompts (benchmarks/study_grids.py)."""


def test_halving_the_budget_is_not_priced_where_few_steps_would_fill_half_of_it() -> None:
    """The bandwidth-bound scenario: ITL p95 failed at 101% of its limit, steps carried 93 of
    2,048 tokens, and 2,048 -> 1,024 was priced 1.67x and screened -0.8%. At 2 req/s over ~28
    steps a second one step in fourteen gets a prompt, and one prompt in twelve is longer
    than 1,024 tokens: the steps that set the p95 keep their length. The same tail at ten
    times the arrivals a step (the quickstart's) is still priced."""
    sparse = _budget(_prune_compute(_chunked(53.5, steps_per_s=140.0, workload=LONGFORM)))
    assert isinstance(sparse, str)
    assert "(0.07 arrivals a step)" in sparse
    assert "fewer than the 5% of gaps c itl p95 reads: half-sized chunks leave it" in sparse
    dense = _budget(_prune_compute(_chunked(53.5, steps_per_s=14.0, workload=LONGFORM)))
    assert isinstance(dense, float) and dense > 1.02


def test_the_chunk_budget_is_priced_past_the_failing_rate_whatever_binds() -> None:
    """The agentic quickstart read bandwidth-bound while its ITL p95 failed from full-chunk
    steps: the knob, acting on compute and scheduling, was ruled out and priced at the
    failing rate alone (1.03x); 2048 -> 512 measured 1.16x. Now it is a candidate, priced at
    the failing rate passing (10 / 9.2, damped) times what the batch gains past it until the
    halved tail (29.9 ms) reaches its 50 ms limit: steps grow (50 / 29.9)^(1 / 0.84), 1.85x."""
    bandwidth = Diagnosis(binding="bandwidth", confidence=0.9)
    found = prune(bandwidth, context_of(_chunked(53.5)), knob_catalogue())
    move = next(c for c in found.candidates if c.knob.name == "max_num_batched_tokens")
    assert move.direction == "down" and move.relieves == "scheduling"
    halved = 53.5 * 0.5**0.84
    growth = (50.0 / halved) ** (1 / 0.84)
    assert move.predicted_ratio == pytest.approx((10.0 / 9.2) ** 0.6 * growth**0.16, abs=1e-3)
    assert f"past it steps may grow {growth:.2f}x before the tail breaks again (1.10x)" in (
        move.reason
    )
    # A tail far from its limit gives the knob nothing whatever binds: still ruled out.
    idle = prune(bandwidth, context_of(_chunked(30.0)), knob_catalogue())
    assert "max_num_batched_tokens" in {r.knob for r in idle.ruled_out}


def test_a_tail_near_its_limit_binds_and_one_far_from_it_or_past_help_does_not() -> None:
    near = _budget(_prune_compute(_chunked(48.5)))  # 97%: the fp8 quickstart's knee
    assert isinstance(near, float)
    idle = _budget(_prune_compute(_chunked(30.0)))
    assert isinstance(idle, str) and "no per-token tail reached its limit at the knee" in idle
    hopeless = _budget(_prune_compute(_chunked(200.0)))
    assert isinstance(hopeless, str) and "would still break its 50 ms limit" in hopeless


def test_the_compute_ceiling_bounds_a_bigger_pool_where_no_per_token_limit_does() -> None:
    """The held-out H100 recording (tests/fixtures/real/h100-llama8b-chat, kv-starved -> base:
    gpu_memory_utilization up, capacity measured 1.94x): its steps went 75 -> 116 tokens in
    8.4 -> 10.0 ms, a fixed ~5.5 ms plus ~39 us a token, so no batch serves more than ~2.2x
    the tokens (2.14x from the recording's unrounded readings, which benchmarks read). Priced
    from the pool it adds alone the move was 2.50x (1.29x off; 1.10x with the ceiling)."""
    response = ServerResponse(low_rate_rps=16.0, high_rate_rps=22.0, low_tokens_per_step=75.0,
                              high_tokens_per_step=116.0, low_step_ms=8.4, high_step_ms=10.0,
                              elasticity=0.41, low_running=31.8, high_running=48.8)  # fmt: skip
    observation = _observe(45.0, {"ttft_p99_ms": 1000}).model_copy(update={"response": response})
    ceiling = compute_ceiling(observation)
    assert ceiling is not None and abs(ceiling.ratio - 2.209) < 0.01
    assert "steps cost 5.5 ms plus 39 us a token" in ceiling.reading
    assert 1.94 / 1.25 <= ceiling.ratio <= 1.94 * 1.25
    assert _kv(_prune(observation)) == ceiling.ratio
    # Steps that grew faster than their tokens have no fixed cost to amortise: no ceiling here
    # (the power law prices any growth at nothing), nor where steps did not grow at all.
    assert compute_ceiling(_observe(45.0, None)) is None


def test_a_goodput_at_rate_objective_caps_every_price_at_its_rate() -> None:
    """The H200 tune at 40 req/s (tests/fixtures/real/h200-llama8b-kv-tune/at-40rps) priced a
    bigger pool at 1.39x where its incumbent already served nearly all of the 40 req/s: the
    screen measured +0.0%. Goodput never passes the rate offered."""
    rule = rules(GoodputAtRate(rate_rps=40.0))
    assert rule.most_gain(39.9) == pytest.approx(40.0 / 39.9)
    assert rule.most_gain(0.0) is None and rules(SloCapacity()).most_gain(10.0) is None
    found = _prune(_observe(45.0, {"ttft_p99_ms": 1000}))
    bounded = in_objective_terms(found.candidates, rule.most_gain(39.9))
    assert all(c.predicted_ratio <= 40.0 / 39.9 for c in bounded)
    kv = next(c for c in bounded if c.knob.name == "kv_cache_memory_bytes")
    assert "capped at 1.00x: goodput cannot pass the offered rate" in kv.reason
    assert "already serves 99.8% of it" in kv.reason
    assert in_objective_terms(found.candidates, None) == found.candidates


def test_a_move_that_carries_the_knee_past_the_rate_is_priced_at_serving_it() -> None:
    """The real multi-turn tune (CI, 2026-11-28) offered 10.6 req/s to an incumbent whose knee
    was 4.8 req/s: its goodput measured 0.00 and 2.65 (mean 1.32, a 141% noise floor), and
    prefix caching, 2.50x in capacity, was never tried. A server with 2.5x the knee serves
    the whole rate, 8.0x the incumbent's goodput, with the chance the prediction's spread
    gives it; a move far short of the rate keeps its capacity ratio."""
    rule = rules(GoodputAtRate(rate_rps=10.6))
    found = _prune(_observe(45.0, {"ttft_p99_ms": 1000}))
    big, near, small = (
        found.candidates[0].model_copy(update={"predicted_ratio": r}) for r in (2.5, 2.1, 1.5)
    )
    short = ShortOfRate(rate_rps=10.6, knee_rps=4.8, spread_log=0.115)
    lifted, even, kept = in_objective_terms([big, near, small], rule.most_gain(1.32), short)
    assert short.chance_served(2.5) == pytest.approx(0.86, abs=0.01)
    assert lifted.predicted_ratio == pytest.approx(0.86 * 10.6 / 1.32 + 0.14 * 2.5, rel=0.01)
    assert "(86% chance that 2.50x the incumbent's 4.8 req/s knee serves the 10.6" in (
        lifted.reason
    )
    # 2.1x of 4.8 is 10.1 req/s: short of the rate by less than the spread, a chance still
    assert 2.1 < even.predicted_ratio < lifted.predicted_ratio
    assert kept == small
    assert in_objective_terms([big], rule.most_gain(1.32))[0] == big


PINNED = REPO / "tests" / "fixtures" / "real" / "cpu-tiny-kv-pinned"
"""The real tier's KV tune on vLLM's CPU build (AVX2-only host, 2026-11-28): a 2.25 MiB pool
that holds three or four of the study's requests, its baseline read as a step response."""


def test_steps_grown_by_their_mix_at_a_pinned_pool_set_no_compute_ceiling() -> None:
    """At 4.66 and 6.12 req/s the pool held 3 sequences either way; steps took 14 -> 20
    tokens as more of a prompt's prefill rode each, and read as steps linear in tokens, that
    priced the bigger pool at 1.01x and ruled it out: the tune never tried it. The same move
    measured 1.9-2.99x in the tier's earlier runs (README) and 1.95x by vllm bench serve."""
    observation = _baseline_of(PINNED)
    assert observation.response is not None and not observation.response.batch_grew()
    assert compute_ceiling(observation) is None
    kv = _cache_bound_kv_price(observation)
    assert isinstance(kv, float) and kv >= 1.9, kv


def _baseline_of(folder: Path) -> Observation:
    """A recorded tune's baseline, read as the tune reads it."""
    (recording,) = find_recorded([folder])
    return observe_study(recording.study, recording.result.config, recording.result)


def _cache_bound_kv_price(observation: Observation) -> str | float:
    """The bigger pool's price (or why it is ruled out), the baseline read cache-bound."""
    context = context_of(observation)
    diagnosis = diagnose(context)
    assert diagnosis.binding == "cache"
    knobs = ("kv_cache_memory_bytes", "max_num_seqs")
    return _kv(prune(diagnosis, context, knob_catalogue(), allowed=knobs, backend=VllmBackend()))


NARROW = REPO / "tests" / "fixtures" / "real" / "cpu-tiny-kv-narrow"
"""The same tune a run later (AVX2-only host, 2026-11-28): a 2.25 MiB pool, TTFT p99 2.1 s."""


def test_steps_a_few_tokens_apart_set_no_compute_ceiling() -> None:
    """Its knee points ran 2 -> 4 sequences in steps of 16 -> 18 tokens, 23.5 -> 26.5 ms: a
    line through them read 1.2 ms a token and capped the bigger pool at 1.16x; a TPE draw
    that happened to raise the pool measured 1.71x. Two tokens apart is no line."""
    observation = _baseline_of(NARROW)
    response = observation.response
    assert response is not None and response.batch_grew()
    assert response.high_tokens_per_step / response.low_tokens_per_step < 1.25
    assert compute_ceiling(observation) is None
    kv = _cache_bound_kv_price(observation)
    assert isinstance(kv, float) and kv >= 1.71, kv
