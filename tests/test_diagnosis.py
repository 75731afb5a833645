"""Table tests of the diagnosis over hand-built signal sets, with every partial-signal case:
GPM present (Hopper), only NVML's coarse utilisation, and no GPU telemetry at all (vLLM's
metrics plus a roofline estimate of the observed steps)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.gpu_time import roofline_reading
from kneepoint.policies.diagnosis.step_estimate import StepEstimate
from kneepoint.records.diagnosis import Diagnosis, Observation
from kneepoint.records.engine import EngineConfig
from tests.support.readings import (
    A100,
    BANDWIDTH,
    BANDWIDTH_H100,
    CACHE,
    CAPPED,
    COMPUTE,
    CPU_BOUND,
    GPM,
    H100,
    L40S,
    LLAMA_1B,
    LLAMA_8B,
    NVML,
    observe,
    point,
    without,
)

CASES = [
    # (name, signals, model, gpu, engine, expected binding, expected sources subset)
    ("compute/gpm", COMPUTE, LLAMA_8B, H100, {}, "compute", {"gpm", "nvml"}),
    ("compute/nvml", without(COMPUTE, *GPM), LLAMA_8B, H100, {}, "compute", {"nvml", "roofline"}),
    ("compute/none", without(COMPUTE, *GPM, *NVML), LLAMA_8B, H100, {}, "compute", {"roofline"}),
    ("bandwidth/gpm", BANDWIDTH_H100, LLAMA_8B, H100, {}, "bandwidth", {"gpm"}),
    ("bandwidth/nvml", BANDWIDTH, LLAMA_8B, L40S, {}, "bandwidth", {"roofline"}),
    ("bandwidth/none", without(BANDWIDTH, *GPM, *NVML), LLAMA_8B, L40S, {}, "bandwidth",
     {"roofline"}),
    ("cache/nvml", CACHE, LLAMA_1B, A100, {"kv_cache_memory_bytes": 2**30}, "cache", {"vllm"}),
    ("cache/none", without(CACHE, *NVML), LLAMA_1B, A100, {"kv_cache_memory_bytes": 2**30},
     "cache", {"vllm"}),
    ("capped/gpm", CAPPED, LLAMA_1B, H100, {"max_num_seqs": 32}, "scheduling", {"gpm"}),
    ("capped/none", without(CAPPED, *GPM, *NVML), LLAMA_1B, H100, {"max_num_seqs": 32},
     "scheduling", {"vllm"}),
    ("cpu/gpm", CPU_BOUND, LLAMA_1B, H100, {"async_scheduling": False}, "scheduling", {"gpm"}),
    ("cpu/none", without(CPU_BOUND, *GPM, *NVML), LLAMA_1B, H100, {"async_scheduling": False},
     "scheduling", {"roofline"}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_the_binding_constraint_is_named_from_whatever_signals_there_are(
    case: tuple[Any, ...],
) -> None:
    _, signals, model, gpu, engine, binding, sources = case
    found = observe(signals, gpu, model, engine=engine)
    assert found.binding == binding, (found.scores, [e.reading for e in found.evidence])
    assert sources <= set(found.sources)
    assert 0.4 <= found.confidence <= 1.0
    assert found.scores[binding] == max(found.scores.values())
    assert any(e.supports == binding and e.weight > 0 for e in found.evidence)
    assert all(e.reading and e.threshold for e in found.evidence)


def test_measured_counters_are_trusted_more_than_the_roofline_alone() -> None:
    full = observe(COMPUTE)
    bare = observe(without(COMPUTE, *GPM, *NVML))
    assert full.binding == bare.binding == "compute"
    assert full.confidence > bare.confidence


def test_an_admission_cap_is_the_scheduling_kind_it_is() -> None:
    found = observe(CAPPED, model=LLAMA_1B, engine={"max_num_seqs": 32})
    assert found.scheduling_kind == "admission_cap"
    cap_line = next(e for e in found.evidence if e.signal == "running_mean")
    assert "max_num_seqs 32" in cap_line.reading and "waiting" in cap_line.reading


def test_cpu_gaps_are_named_cpu_overhead() -> None:
    found = observe(CPU_BOUND, model=LLAMA_1B, engine={"async_scheduling": False})
    assert found.scheduling_kind == "cpu_overhead"


def test_prefill_interference_is_scheduling_when_itl_tails_fail() -> None:
    mixed = {**BANDWIDTH_H100, "waiting_mean": 1.5, "tokens_per_step_mean": 900.0}
    failing = ("c itl_p99 180 ms > 100 ms",)
    found = observe(mixed, violations=failing, itl=(22.0, 180.0))
    assert (found.binding, found.scheduling_kind) == ("scheduling", "prefill_interference")
    assert found.runner_up == "bandwidth"
    # The same tail is not interference when ITL is not what fails.
    calm = observe(mixed, violations=("c ttft_p99 1200 ms > 1000 ms",), itl=(22.0, 180.0))
    assert calm.binding == "bandwidth"


def test_a_client_that_fell_behind_names_no_constraint() -> None:
    found = observe(COMPUTE, lag_ms=25.0)
    assert found.binding == "client_bound" and found.constraint is None
    assert "25.0 ms late" in found.evidence[0].reading


def test_a_point_that_met_its_slo_with_no_queue_is_underloaded() -> None:
    calm = {**BANDWIDTH, "gpu_util_pct": 40.0}
    found = observe(calm, violations=())
    assert found.binding == "underloaded" and found.constraint is None


def test_no_signals_at_all_is_inconclusive_not_a_guess() -> None:
    found = observe({"waiting_mean": 5.0})
    assert found.binding == "inconclusive"
    assert found.confidence < 0.4


def test_busy_gpu_with_nothing_to_split_it_is_inconclusive() -> None:
    # NVML says busy, but without GPM or the engine's step metrics nothing splits math from
    # memory traffic: the diagnosis must not pick one.
    found = observe({"gpu_util_pct": 99.0, "waiting_mean": 3.0, "running_mean": 10.0})
    assert found.binding == "inconclusive"
    assert any(e.signal == "compute_vs_bandwidth" for e in found.evidence)


def test_below_the_knee_point_adds_what_changed() -> None:
    saturated, below = point(CACHE), point({**CACHE, "kv_usage_mean": 0.4, "waiting_mean": 0.0})
    engine = EngineConfig(model="m", kv_cache_memory_bytes=2**30)
    found = diagnose(
        context_of(
            Observation(saturated=saturated, below=below, gpu=A100, model=LLAMA_1B, engine=engine)
        )
    )
    change = next(e for e in found.evidence if e.signal == "kv_usage_mean_change")
    assert change.value == pytest.approx(0.59) and "0.40" in change.reading


def test_headline_reads_as_a_sentence() -> None:
    found = observe(CAPPED, model=LLAMA_1B, engine={"max_num_seqs": 32})
    assert found.headline().startswith("scheduling (admission cap)-bound, confidence")
    assert math.isclose(sum(found.scores.values()), 1.0, abs_tol=0.05)


def test_an_slo_missed_with_nothing_queued_is_read_per_step_not_from_nvml() -> None:
    # Mistral-7B on an L4 at one request at a time: every decode step streams 14.5 GB at
    # 0.3 TB/s, ~64 ms, over a 30 ms ITL limit. NVML reads 5% because the GPU idles between
    # requests; that idleness is not a scheduling wall.
    alone = {
        "kv_usage_mean": 0.016, "running_mean": 1.0, "waiting_mean": 0.0,
        "preemptions_per_s": 0.0, "tokens_per_step_mean": 1.4, "steps_per_s": 0.77,
        "generation_tokens_per_s": 0.79, "num_gpu_blocks": 3088, "block_size": 16,
        "gpu_util_pct": 5.0, "memory_util_pct": 5.0,
    }  # fmt: skip
    l4, mistral = gpu_catalogue()["l4"], model_catalogue()["mistral-7b"]
    found = observe(alone, l4, mistral, violations=("c itl_p95 64 ms > 30 ms",), itl=(63.7, 64.7))
    assert found.binding == "bandwidth", found.scores
    assert any("idles between requests" in e.reading for e in found.evidence)


@pytest.mark.parametrize(
    ("gpu_ms", "step_ms", "words"),
    [
        (20.27, 17.94, "underrates this GPU by 13%"),
        (9.0, 18.0, "accounts for 9.00 ms of GPU work (50%)"),
    ],
)
def test_the_roofline_reading_never_says_more_gpu_time_than_the_step(
    gpu_ms: float, step_ms: float, words: str
) -> None:
    # Once read "prices the observed step at 20.27 ms of GPU time of its 17.94 ms".
    estimate = StepEstimate(observed_step_s=step_ms / 1e3, gpu_s=gpu_ms / 1e3, launch_s=0.0,
                            compute_share=0.5, context_tokens=512.0)  # fmt: skip
    reading = roofline_reading(estimate)
    assert words in reading and "of its" not in reading


@pytest.mark.parametrize(
    ("binding", "words"),
    [("inconclusive", "every knob family stays a candidate"),
     ("underloaded", "measure at higher rates"), ("client_bound", "give it a core")],
)  # fmt: skip
def test_a_verdict_that_names_no_constraint_says_what_to_do(binding: str, words: str) -> None:
    headline = Diagnosis(binding=binding, confidence=0.0).headline()  # type: ignore[arg-type]
    assert headline.startswith(f"{binding} (no constraint named: ") and words in headline


def test_preemptions_in_a_roomy_pool_with_nothing_waiting_do_not_take_half_the_time() -> None:
    # A library of 6,144-token documents on an A100's small pool (benchmarks/scenario_grid.py,
    # library-02): 40% full on average, nothing waiting, 0.05 evictions per request when a few
    # long prompts met; the truth charged the cache 9% of the time and HBM reads 77%.
    burst = {**BANDWIDTH, "kv_usage_mean": 0.40, "waiting_mean": 0.1, "preemptions_per_s": 0.5}
    found = observe(burst, L40S)
    assert found.binding == "bandwidth", found.scores
    assert found.scores["cache"] == pytest.approx(0.25, abs=0.01)  # 0.05 per request / 0.2
    # the same churn in a pool under pressure, requests queueing: half the time at least
    pressed = {**burst, "kv_usage_mean": 0.85, "waiting_mean": 3.0}
    assert observe(pressed, L40S).scores["cache"] >= 0.5
