"""The shipped scenarios bind where their names say, and knobs move them the right way.

Capacities are SLO capacities found by bisection on the virtual clock, with the same requests
at every rate (common random numbers), so two configurations are compared on identical load.
"Its knee" is the bracket the search ends on: the last rate that met the SLO and the first that
did not; a cache-bound server falls off a cliff there (preemption churn), so both sides count.
"""

from __future__ import annotations

from functools import cache

import pytest

from kneepoint.config.study import load_study
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.study import StudySpec
from kneepoint.sim.attribution import Attribution
from kneepoint.sim.loadpoint import SimLoadPoint, simulate_capacity, simulate_load_point

from .conftest import CONFIGS

SCENARIOS = CONFIGS / "scenarios"
# Requests per load point and the first rate to try, per scenario: enough requests for a
# stable window well past warm-up, few enough to keep the suite quick.
SIZING = {
    "compute-bound": (400, 8.0),
    "bandwidth-bound": (300, 1.0),
    "scheduling-bound": (1000, 80.0),
    "cache-bound": (500, 8.0),
}


def study(name: str, *overrides: str) -> StudySpec:
    return load_study(SCENARIOS / f"{name}.yaml", overrides)


@cache
def knee(name: str, *overrides: str) -> tuple[float, SimLoadPoint, SimLoadPoint]:
    """(capacity, load point at it, load point just past it) for a scenario with overrides."""
    spec = study(name, *overrides)
    requests, start = SIZING[name]
    capacity, at = simulate_capacity(spec, requests, start, rel_tol=0.02)
    assert at is not None and capacity.failing_rps is not None
    past = simulate_load_point(spec, capacity.failing_rps, requests)
    return capacity.passing_rps, at, past


def gain(name: str, *overrides: str) -> float:
    return knee(name, *overrides)[0] / knee(name)[0]


# Replicas of real cases, tested against their published figures in test_real_replicas.py.
REPLICAS = {"qwen14b-ada-mix", "gemma12b-h100-random"}
# A front-end-bound server, tested in test_api_servers.py: its API server's wait lies outside
# the engine's steps, which is all the simulator's ground truth charges.
FRONTEND = {"frontend-bound"}
# Speculation as the lever (tested in test_acceptance_probe.py): its decode streams the
# weights for a few dozen sequences, bandwidth's wall, which drafts turn into more tokens.
SPECULATION = {"code-edits"}
# KV offloading as the lever (tested in test_kv_offload.py): a library the pool cannot keep.
OFFLOAD = {"document-qa"}


def test_every_scenario_file_is_tested() -> None:
    scenarios = {p.stem for p in SCENARIOS.glob("*.yaml")}
    assert scenarios == set(SIZING) | REPLICAS | FRONTEND | SPECULATION | OFFLOAD


@pytest.mark.slow  # a knee search per scenario on the virtual clock (~25 s in all)
@pytest.mark.parametrize("name", sorted(SIZING))
def test_scenario_is_dominated_by_its_label_at_its_knee(name: str) -> None:
    _, at, past = knee(name)
    truth: Attribution = at.truth + past.truth
    label = name.removesuffix("-bound")
    dominant, share = truth.dominant()
    assert (dominant, share >= 0.7) == (label, True), truth.shares()


@pytest.mark.slow  # several knee searches on the virtual clock
def test_fp8_weights_lift_compute_bound_h100_far_more_than_cache_bound_a100() -> None:
    # Hopper's fp8 GEMMs speed up the prefill-heavy compute wall, by far less than the
    # datasheet's 2x (real H100 vLLM 0.26: +10.2% on chat, tests/fixtures/real; a 12B model's
    # prefill-heavy ceiling +14%); on Ampere fp8 only halves weight bytes, and the cache-bound
    # scenario's pool is pinned, so only its weight reads shrink.
    compute = gain("compute-bound", "engine.quantization=fp8")
    cache_gain = gain("cache-bound", "engine.quantization=fp8")
    assert 1.1 <= compute <= 1.5
    assert cache_gain < 1.25
    assert compute > cache_gain


@pytest.mark.slow  # several knee searches on the virtual clock
def test_async_scheduling_lifts_scheduling_bound_not_compute_bound() -> None:
    assert gain("scheduling-bound", "engine.async_scheduling=true") >= 1.10
    assert abs(gain("compute-bound", "engine.async_scheduling=false") - 1.0) <= 0.02


@pytest.mark.slow  # four 2,000-request points on the virtual clock
def test_more_kv_memory_relieves_the_cache_scenario() -> None:
    """Sustained points: at the scenario's 500-request knee search a doubled pool read 1.26x
    and, once a backlog that grows misses its SLO (load/backlog.py), 1.09x, because the
    backlog showed on the doubled pool's settled points and not on the starved pool's, still
    filling up when they ended. Over 2,000 requests the starved pool meets its SLO at 8 req/s
    and misses at 9 (TTFT p99 14 s); the doubled pool still meets at 10, with a tenth of the
    preemptions (2026-12-03)."""
    tight, roomy = (
        study("cache-bound"),
        study("cache-bound", "engine.kv_cache_memory_bytes=2147483648"),
    )
    assert simulate_load_point(tight, 8.0, 2000).point.meets_slo
    starved = simulate_load_point(tight, 10.0, 2000)
    doubled = simulate_load_point(roomy, 10.0, 2000)
    assert not starved.point.meets_slo and doubled.point.meets_slo
    assert doubled.preemptions < starved.preemptions / 4


@pytest.mark.slow  # several knee searches on the virtual clock
def test_raising_max_num_seqs_helps_until_the_kv_pool_binds() -> None:
    # Pin a small pool under the scheduling scenario: past some cap, blocks run out first.
    pool = "engine.kv_cache_memory_bytes=536870912"
    caps = [knee("scheduling-bound", pool, f"engine.max_num_seqs={n}") for n in (8, 16, 128, 256)]
    rates = [c[0] for c in caps]
    assert rates[0] * 1.5 < rates[1] < rates[2]
    assert abs(rates[3] / rates[2] - 1.0) <= 0.05
    _, at, past = caps[3]
    assert (at.truth + past.truth).dominant()[0] == "cache"


@pytest.mark.parametrize("shared", [512, 1536])
def test_prefix_caching_cuts_ttft_in_proportion_to_the_shared_prefix(shared: int) -> None:
    own = 2048 - shared
    overrides = (
        "workload.prefix_groups=[{name: doc, documents: 1, prefix_tokens: " + f"{shared}" + "}]",
        "workload.classes.0.prefix_group=doc",
        f"workload.classes.0.input_tokens={{kind: fixed, tokens: {own}}}",
        "workload.classes.0.output_tokens={kind: fixed, tokens: 1}",
    )

    def ttft_p50(caching: bool) -> float:
        spec = study("compute-bound", *overrides, f"engine.enable_prefix_caching={caching}")
        point = simulate_load_point(spec, 0.5, 40)  # one request at a time: no queueing
        # The engine's share: the API server's latency does not depend on the cache.
        frontend_ms = (spec.efficiency or Efficiency()).frontend_latency_s * 1e3
        return point.score.dists["summarise"]["ttft"].p50_ms - frontend_ms

    ratio = ttft_p50(True) / ttft_p50(False)
    assert ratio == pytest.approx(own / 2048, abs=0.06)


def test_scenarios_are_deterministic() -> None:
    spec = study("scheduling-bound")
    one = simulate_load_point(spec, 50.0, 200)
    two = simulate_load_point(spec, 50.0, 200)
    assert one.load.records == two.load.records
    assert one.truth == two.truth
