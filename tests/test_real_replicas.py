"""Replicas of real cases as shipped scenarios: the simulator and kneepoint's decisions against
the figures real engines published (issue "Step 7"), each with its tolerance beside it.

qwen14b-ada-mix: Qwen2.5-14B on one RTX 6000 Ada, four classes at Poisson 32 req/s, long
prompts from 5 shared source files. Real: prefix caching off -> on took output 144 -> 661
tok/s (4.6x) and completion 21% -> 75% at a ~72% hit rate; the server was KV-starved (57k
tokens of KV).

gemma12b-h100-random: a Gemma-class 12B (sliding window 1024 on 40 of 48 layers) on one
H100, vLLM defaults, 1024-in / 128-out. Real: output ceiling ~2,070 tok/s past a ~8 req/s
knee, fp8 weights +14% on it. What the simulator does not reproduce there (its knee, its KV
use) is written in the scenario file. This project's own recording of the same shape and
settings (tests/fixtures/real/h100-gemma12b-random, vLLM 0.26.0, 2026-11-24) puts the knee at
18.4 req/s with the pool 66% full there, the ceiling at 1,985 tok/s and fp8 at +20% on it:
tests/test_real_recordings_h100.py holds the simulator to those.
"""

from __future__ import annotations

from functools import cache

import pytest

from kneepoint.config.catalog import knob_catalogue
from kneepoint.config.study import load_study
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.roofline import BatchShape, step_cost
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.diagnosis import Observation
from kneepoint.records.study import StudySpec
from kneepoint.sim.loadpoint import SimLoadPoint, simulate_load_point

from .conftest import CONFIGS

QWEN_MIX = CONFIGS / "scenarios" / "qwen14b-ada-mix.yaml"
GEMMA = CONFIGS / "scenarios" / "gemma12b-h100-random.yaml"
RATE_RPS = 32.0  # the published load
REQUESTS = 1200


def study(*overrides: str) -> StudySpec:
    return load_study(QWEN_MIX, overrides)


@cache
def at_rate(*overrides: str) -> SimLoadPoint:
    return simulate_load_point(study(*overrides), RATE_RPS, REQUESTS)


def test_the_qwen_mix_is_cache_bound_and_prefix_caching_is_predicted_first() -> None:
    spec = study()
    below = simulate_load_point(spec, 8.0, 400)
    observation = Observation(saturated=at_rate().point, below=below.point, gpu=spec.gpu,
                              model=spec.model, engine=spec.engine,
                              workload=spec.workload)  # fmt: skip
    diagnosis = diagnose(context_of(observation))
    assert diagnosis.binding == "cache"
    pruning = prune(diagnosis, context_of(observation), knob_catalogue(), backend=VllmBackend())
    first = pruning.candidates[0]
    assert first.knob.name == "enable_prefix_caching"
    # Real: 4.6x on output tokens; the prediction is capped at 2.5x, and must beat the next
    # knob (fp8 KV, which doubles the pool) by a margin.
    assert first.predicted_ratio >= 2.0
    assert first.predicted_ratio > 1.3 * pruning.candidates[1].predicted_ratio


def test_prefix_caching_at_least_doubles_goodput_and_output_on_the_qwen_mix() -> None:
    off, on = at_rate(), at_rate("engine.enable_prefix_caching=true")
    assert off.point.signals.prefix_hit_rate == 0.0
    # Real hit rate ~72%: 5 documents of 3072 tokens, resident once computed.
    assert 0.6 <= (on.point.signals.prefix_hit_rate or 0.0) <= 0.95
    real_ratio = 661 / 144
    tokens_off = off.point.signals.generation_tokens_per_s or 0.0
    tokens_on = on.point.signals.generation_tokens_per_s or 0.0
    assert tokens_on >= 2.0 * tokens_off  # real 4.6x; simulated ~2.9x (239 -> 699 tok/s)
    assert tokens_on / tokens_off <= real_ratio * 1.25
    assert on.score.good >= 2 * max(1, off.score.good)


@cache
def gemma_output_tok_s(rate_rps: float, *overrides: str) -> float:
    spec = load_study(GEMMA, overrides)
    point = simulate_load_point(spec, rate_rps, int(rate_rps * 60))
    return point.point.signals.generation_tokens_per_s or 0.0


def gemma_ceiling(*overrides: str) -> float:
    """The highest output rate over offered rates from 12 to 24 req/s (past the knee)."""
    return max(gemma_output_tok_s(rate, *overrides) for rate in (12.0, 16.0, 18.0, 24.0))


@pytest.mark.slow  # eight load points of a 12B model (~40 s)
def test_the_gemma_ceiling_and_fp8_gain_on_it_match_the_real_h100() -> None:
    bf16, fp8 = gemma_ceiling(), gemma_ceiling("engine.quantization=fp8")
    # Real ~2,070 tok/s (published) and 1,985 (our recording's peak); simulated ~1,910.
    assert bf16 == pytest.approx(2070, rel=0.15)
    assert bf16 == pytest.approx(1985, rel=0.15)
    assert 1.05 <= fp8 / bf16 <= 1.25  # real +14% (published), +20% (ours); simulated ~+10%


def test_awq_makes_the_qwen_mix_steps_slower_than_bf16_at_the_baselines_batch() -> None:
    # Real, at 32 req/s: short-class ITL p50 182 -> 557 ms with the AWQ checkpoint (int4
    # weights dequantised on the GEMMs' critical path). The simulated baseline's steps there
    # carry a few hundred tokens (its mean step: ~443 prefill beside ~35 decodes); priced for
    # both checkpoints, that step runs slower with AWQ (~115 ms against bf16's ~85). The
    # simulated token gaps do not show it: their median is a decode-only step (~60 ms for
    # both, against the real 182 ms for bf16), whose 3x smaller weight reads hide the
    # dequantisation (the scenario file says so).
    signals = at_rate().point.signals
    running = round(signals.running_mean or 0.0)
    prefill = round(signals.tokens_per_step_mean or 0.0) - running
    assert running >= 16 and prefill >= 256  # a few hundred tokens beside the decodes
    # KV reads are the same for both checkpoints: any context does for the comparison.
    shape = BatchShape.of([(1, 2048)] * running + [(prefill, 0)])

    def step_ms(*overrides: str) -> float:
        spec = study(*overrides)
        engine = resolve_engine(spec.engine, spec.gpu, spec.model)
        return step_cost(spec.gpu, spec.model, engine, shape).wall_s * 1e3

    bf16, awq = step_ms(), step_ms("engine.model=Qwen/Qwen2.5-14B-Instruct-AWQ")
    assert awq > 1.1 * bf16
