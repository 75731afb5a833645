"""Sliding-window and hybrid attention: config.json forms, vLLM's KV cache groups and pool,
the allocator's per-group charges, window-clipped attention cost, and a simulated load point.

The group and pool arithmetic follows vLLM V1's vllm/v1/core/kv_cache_utils.py
(``_get_kv_cache_groups_uniform_page_size``, ``get_kv_cache_config_from_groups``,
``_report_kv_cache_config``) and vllm/v1/core/single_type_kv_cache_manager.py
(``SlidingWindowManager.get_num_skipped_tokens``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kneepoint.config import ConfigError, gpu_catalogue, model_catalogue, model_from_hf_config
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.kv_manager import kv_layout
from kneepoint.physics.memory import plan_memory
from kneepoint.physics.roofline import BatchShape, Roofline, window_pairs
from kneepoint.records.engine import EngineConfig
from kneepoint.records.hardware import MIB, ModelSpec
from kneepoint.sim.engine import Arrival, SimEngine
from kneepoint.sim.kv_cache import KvCache
from kneepoint.sim.request import SimRequest

H100 = gpu_catalogue()["h100-sxm"]
GEMMA_12B = model_catalogue()["gemma-3-12b"]
LLAMA_8B = model_catalogue()["llama-3.1-8b"]
GEMMA_FULL = GEMMA_12B.model_copy(
    update={"sliding_window_tokens": None, "sliding_window_layers": 0}
)
"""The same shape with every layer attending over the whole context."""

# google/gemma-3-12b-it's text_config as published: the rest comes from Gemma3TextConfig.
GEMMA_12B_TEXT = {
    "hidden_size": 3840,
    "intermediate_size": 15360,
    "model_type": "gemma3_text",
    "num_attention_heads": 16,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "sliding_window": 1024,
}
BASE = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
}


def _read(tmp_path: Path, config: dict[str, Any]) -> ModelSpec:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return model_from_hf_config(tmp_path)


def _engine(model: ModelSpec, **knobs: Any):  # type: ignore[no-untyped-def]
    return resolve_engine(EngineConfig(model="m", **knobs), H100, model)


# config.json


def test_gemma3_pattern_and_class_defaults(tmp_path: Path) -> None:
    spec = _read(tmp_path, {"model_type": "gemma3", "text_config": GEMMA_12B_TEXT})
    # every 6th layer full (layers 5, 11, ..., 47): 40 of 48 slide
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (1024, 40)
    assert (spec.head_dim, spec.vocab_size, spec.tie_word_embeddings) == (256, 262208, True)
    shape = GEMMA_12B.model_dump(exclude={"name", "hf_id", "params_total"})
    assert spec.model_dump(exclude={"name", "hf_id", "params_total"}) == shape


def test_layer_types_are_counted(tmp_path: Path) -> None:
    kinds = ["sliding_attention", "full_attention"] * 16  # gpt-oss style alternation
    spec = _read(tmp_path, {**BASE, "sliding_window": 128, "layer_types": kinds})
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (128, 16)


def test_a_bare_window_slides_every_layer(tmp_path: Path) -> None:
    # Mistral 7B v0.1: sliding_window 4096 of 32768 positions, no pattern
    spec = _read(tmp_path, {**BASE, "sliding_window": 4096})
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 32)
    assert spec.full_attention_layers == 0


@pytest.mark.parametrize(
    "extra",
    [
        {"sliding_window": None},  # Mistral 7B v0.3
        {"sliding_window": 32768},  # as long as the context: no window
        {"sliding_window": 4096, "use_sliding_window": False},  # Qwen2
    ],
)
def test_no_window(tmp_path: Path, extra: dict[str, Any]) -> None:
    spec = _read(tmp_path, {**BASE, **extra})
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (None, 0)


def test_a_bad_layer_kind_names_file_and_field(tmp_path: Path) -> None:
    kinds = ["full_attention"] * 31 + ["linear_attention"]
    with pytest.raises(ConfigError) as info:
        _read(tmp_path, {**BASE, "sliding_window": 4096, "layer_types": kinds})
    assert str(info.value) == (
        f"{tmp_path / 'config.json'}: layer_types[31]: 'linear_attention' is not one of "
        "sliding_attention, full_attention"
    )


def test_model_spec_checks_the_window() -> None:
    with pytest.raises(ValidationError, match="at most num_layers"):
        GEMMA_12B.model_validate({**GEMMA_12B.model_dump(), "sliding_window_layers": 49})
    with pytest.raises(ValidationError, match="needs sliding_window_tokens"):
        GEMMA_12B.model_validate({**GEMMA_12B.model_dump(), "sliding_window_tokens": None})


# KV cache groups and the pool


def test_groups_as_vllm_forms_them() -> None:
    gemma = kv_layout(GEMMA_12B, _engine(GEMMA_12B))
    # Gemma 3's 5:1 pattern: groups of 8 layers, 1 full + 5 sliding
    assert (gemma.layers_per_group, gemma.full_groups, gemma.sliding_groups) == (8, 1, 5)
    assert gemma.block_bytes == 1 * MIB  # 16 tokens x 8 layers x 2 x 8 heads x 256 x 2 bytes
    # gpt-oss-20b: 12 + 12 layers, two groups of 12 (within vLLM's 1.5x slack)
    oss = GEMMA_12B.model_copy(update={"num_layers": 24, "sliding_window_layers": 12})
    assert kv_layout(oss, _engine(oss)).groups == 2
    # Gemma 3 27B: 62 layers, 10 full, 52 sliding: 10-layer groups, the last sliding one padded
    big = GEMMA_12B.model_copy(update={"num_layers": 62, "sliding_window_layers": 52})
    big_layout = kv_layout(big, _engine(big))
    assert (big_layout.layers_per_group, big_layout.groups) == (10, 7)
    assert kv_layout(LLAMA_8B, _engine(LLAMA_8B)).groups == 1


def test_gemma_12b_pool_on_h100_as_vllm_logs_it() -> None:
    plan = plan_memory(H100, GEMMA_12B, _engine(GEMMA_12B))  # vLLM defaults: utilisation 0.92
    assert plan.refusal is None
    assert plan.num_blocks == int(plan.kv_bytes // MIB) == 50_583
    # "GPU KV cache size": blocks // 6 groups x 16 tokens, i.e. counted over all 48 layers,
    # exactly what the same shape without a window gets
    assert plan.kv_tokens == 50_583 // 6 * 16 == 134_880
    assert plan.kv_tokens == plan_memory(H100, GEMMA_FULL, _engine(GEMMA_FULL)).kv_tokens
    # a 131072-token request holds 8192 full blocks and 5 x (cdiv(1023 + 8192, 16) + 1)
    assert plan.request_blocks_max == 8192 + 5 * 577
    assert plan.max_concurrency == pytest.approx(50_583 / 11_077)


def test_too_long_a_context_is_refused_with_vllms_estimate() -> None:
    engine = _engine(
        GEMMA_12B, kv_cache_memory_bytes=700 * MIB, max_model_len=4096, max_num_batched_tokens=512
    )
    plan = plan_memory(H100, GEMMA_12B, engine)
    assert plan.refusal is not None and plan.refusal.kind == "max_model_len_too_long"
    # 3440 tokens: 215 full blocks + 5 x (cdiv(1023 + 512, 16) + 1) = 700 blocks, the pool
    assert "estimated maximum model length is 3440." in plan.refusal.message


def test_full_attention_pool_is_unchanged() -> None:
    # tests/fixtures/real/README.md: vLLM logged 450,736 tokens; the model gives this figure,
    # from the same formula as before hybrid groups existed: bytes // (128 KiB x 16) x 16.
    engine = _engine(LLAMA_8B, gpu_memory_utilization=0.9, max_model_len=8192)
    plan = plan_memory(H100, LLAMA_8B, engine)
    assert plan.num_blocks == int(plan.kv_bytes // (128 * 1024 * 16))
    assert plan.kv_tokens == plan.num_blocks * 16
    assert plan.max_concurrency == plan.kv_tokens / 8192


# the allocator


def _prefill(kv: KvCache, tokens: int, chunk: int = 2048) -> SimRequest:
    req = SimRequest(0, tuple(range(tokens)), max_tokens=1, arrival_s=0.0)
    while req.num_computed < tokens:
        new = min(chunk, tokens - req.num_computed)
        assert kv.allocate(req, new)
        req.num_computed += new
    return req


def test_a_long_request_holds_the_window_in_sliding_groups() -> None:
    layout = plan_memory(H100, GEMMA_12B, _engine(GEMMA_12B)).layout
    kv = KvCache(50_583, 16, prefix_caching=False, layout=layout)
    req = _prefill(kv, 16_384)
    # full group: 1024 blocks; each sliding group: blocks from (14336 - 1024 + 1) // 16 = 832
    # on, as vLLM frees them before the last chunk's allocation
    assert kv.num_used == 1024 + 5 * (1024 - 832)
    # the same memory with every layer full: 6-layer-group blocks become 48-layer blocks
    full = KvCache(50_583 // 6, 16, prefix_caching=False)
    _prefill(full, 16_384)
    assert kv.usage == pytest.approx(0.0392, abs=0.0001)
    assert full.usage == pytest.approx(0.1215, abs=0.0001)
    kv.free(req)
    assert kv.num_used == 0


def test_decoding_past_the_window_frees_as_it_goes() -> None:
    layout = plan_memory(H100, GEMMA_12B, _engine(GEMMA_12B)).layout
    kv = KvCache(50_583, 16, prefix_caching=False, layout=layout)
    req = _prefill(kv, 1024)
    for _ in range(4097):  # one token a step, a block every 16
        assert kv.allocate(req, 1)
        req.num_computed += 1
    # just after a block boundary, as vLLM: 321 full blocks, 65 per sliding group (vLLM frees
    # an out-of-window block one step sooner, at computed = 5119; here at the next allocation)
    assert kv.num_used == layout.blocks_held(req.num_computed) == 321 + 5 * 65


def test_every_layer_sliding_frees_the_tracked_blocks() -> None:
    mistral = model_catalogue()["mistral-7b"].model_copy(
        update={"sliding_window_tokens": 4096, "sliding_window_layers": 32}
    )
    layout = kv_layout(mistral, _engine(mistral))
    kv = KvCache(10_000, 16, prefix_caching=True, layout=layout)
    req = _prefill(kv, 16_384)
    assert kv.num_used == 1024 - (16_384 - 2048 - 4096 + 1) // 16
    assert req.blocks[:100] == [-1] * 100
    kv.free(req)
    assert kv.num_used == 0


# attention cost


def test_window_pairs_closed_form() -> None:
    assert window_pairs(1, 4000, 1024) == 1024  # a decode sees the window
    assert window_pairs(100, 0, 1024) == 100 * 101 / 2  # a short prefill, as full attention
    assert window_pairs(2048, 0, 1024) == 1024 * 1025 / 2 + 1024 * 1024


def test_long_context_decode_is_faster_with_the_window() -> None:
    engine = _engine(GEMMA_12B)
    shape = BatchShape.of([(1, 32_768)] * 64, window=1024)
    windowed = Roofline(H100, GEMMA_12B, engine).step(shape)
    full = Roofline(H100, GEMMA_FULL, engine).step(shape)
    # KV read: 8 full layers over 32769 tokens + 40 over 1024, against 48 over 32769
    kv_ratio = (8 * 32_769 + 40 * 1024) / (48 * 32_769)
    assert windowed.kv_read_s / full.kv_read_s == pytest.approx(kv_ratio)
    assert windowed.wall_s < 0.4 * full.wall_s
    # unclipped shapes price every layer as full
    assert Roofline(H100, GEMMA_12B, engine).step(BatchShape.of([(1, 32_768)] * 64)) == full


# the simulator end to end


def _arrivals(rate: float, count: int, prompt: int, output: int) -> list[Arrival]:
    rng, at, out = random.Random(7), 0.0, []
    for _ in range(count):
        at += rng.expovariate(rate)
        out.append(Arrival(at, tuple(rng.randrange(10_000, 10**6) for _ in range(prompt)), output))
    return out


def test_cohort_window_sums_match_step_by_step() -> None:
    # prompts of 960 cross the 1024 window while decoding 200 tokens
    arrivals = _arrivals(6, 150, 960, 200)
    bulk = SimEngine(H100, GEMMA_12B, EngineConfig(model="m")).run(arrivals)
    eager = SimEngine(H100, GEMMA_12B, EngineConfig(model="m"), eager=True).run(arrivals)
    assert [s.shape for s in bulk.steps] == [s.shape for s in eager.steps]
    assert [s.kv_usage for s in bulk.steps] == [s.kv_usage for s in eager.steps]


def test_gemma_12b_load_point_runs_end_to_end() -> None:
    # The load: 1024 in / 128 out on one H100 at vLLM's defaults
    engine = SimEngine(H100, GEMMA_12B, EngineConfig(model="m"))
    run = engine.run(_arrivals(4, 300, 1024, 128))
    assert len(run.finished) == 300
    assert all(len(r.output) == 128 for r in run.finished)
    steady = [s for s in run.steps if 10 < s.start_s < 60]
    usage = sum(s.kv_usage for s in steady) / len(steady)
    running = sum(s.running for s in steady) / len(steady)
    # about 72 + 5 x 65 blocks per 1152-token request, of 50,583: ~0.8% each
    assert usage / running == pytest.approx(397 / 50_583, rel=0.25)
    assert usage < 0.10
    assert engine.kv.num_used == 0


MISTRAL_SLIDING = model_catalogue()["mistral-7b"].model_copy(
    update={"sliding_window_tokens": 512, "sliding_window_layers": 32}
)


@pytest.mark.parametrize(
    ("model", "pool_mib"), [(GEMMA_12B, 1000), (MISTRAL_SLIDING, 300)], ids=["hybrid", "all"]
)
def test_a_tight_pool_with_shared_prefixes_balances_its_books(
    model: ModelSpec, pool_mib: int
) -> None:
    # Every other request starts with the same 1600 tokens (past the window, so prefix hits
    # skip blocks), and a pool of a few requests' worth preempts as their answers grow.
    rng, at, arrivals = random.Random(3), 0.0, []
    shared = tuple(range(1, 1601))
    for i in range(120):
        at += rng.expovariate(20)
        own = tuple(rng.randrange(10_000, 10**6) for _ in range(300))
        arrivals.append(Arrival(at, (shared if i % 2 else ()) + own, 1000))
    config = EngineConfig(
        model="m",
        kv_cache_memory_bytes=pool_mib * MIB,
        max_model_len=4096,
        max_num_batched_tokens=512,
    )
    bulk_engine = SimEngine(H100, model, config)
    bulk = bulk_engine.run(arrivals)
    eager = SimEngine(H100, model, config, eager=True).run(arrivals)
    assert len(bulk.finished) == 120
    assert sum(r.preemptions for r in bulk.finished) > 0
    assert sum(r.prefix_hit_tokens for r in bulk.finished) > 0
    assert [s.shape for s in bulk.steps] == [s.shape for s in eager.steps]
    assert [s.kv_usage for s in bulk.steps] == [s.kv_usage for s in eager.steps]
    assert max(s.kv_usage for s in bulk.steps) <= 1.0
    assert bulk_engine.kv.num_used == 0  # every block given back
