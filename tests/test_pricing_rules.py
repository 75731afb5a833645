"""The pricing rules' contract, one suite for every rule in ``PRICING_RULES`` (as proposers,
objectives and backends have theirs): asked in the situation pruning builds for its knob, under
any constraint, a rule answers an ``Effect`` (a direction, a finite ratio within the damping's
bounds, a reason) or one line saying why the knob cannot help; it is pure (the same answer
twice, the situation untouched); the suite reaches every rule's priced branch at least once;
and a batch-growing move pruning keeps is priced no higher than the incumbent's own measured
ceilings allow.

The situations are every real recording in tests/fixtures/real, read as a tune reads its
baseline, and hand-built readings of each binding resource on a GPU and on vLLM's CPU build,
a dense and a mixture-of-experts model, chat and shared-prefix traffic."""

from __future__ import annotations

import itertools
import math
from functools import cache
from typing import get_args

import pytest

from kneepoint.calibration.recorded import find_recorded
from kneepoint.config.catalog import gpu_catalogue, knob_catalogue, model_catalogue
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.ceiling import (
    GROWING,
    RELIEVED_BY_ROOM,
    compute_ceiling,
    latency_ceiling,
)
from kneepoint.policies.pruning.knob_effects import MAX_RATIO, Effect, Situation, aimed_at
from kneepoint.policies.pruning.prune import PRICING_RULES, asked, prune, situation_of
from kneepoint.policies.pruning.quant_effects import held_conditions
from kneepoint.records import Constraint, Direction
from kneepoint.records.diagnosis import Diagnosis, Observation
from kneepoint.records.engine import EngineConfig
from kneepoint.records.slo import Slo
from tests.conftest import REPO
from tests.support.pruned import CHAT, RAG
from tests.support.readings import (
    BANDWIDTH_H100,
    CACHE,
    CAPPED,
    COMPUTE,
    CPU_BOUND,
    point,
)

CATALOGUE = knob_catalogue()
GPUS, MODELS = gpu_catalogue(), model_catalogue()
FEW = {"running_mean": 3.0, "tokens_per_step_mean": 3.0, "generation_tokens_per_s": 285.0}
"""Three sequences decoding a token a step: where whole experts on a rank stream more than
slices of every expert."""
READINGS = {
    "compute": ("compute", None, COMPUTE),
    "bandwidth": ("bandwidth", None, BANDWIDTH_H100),
    "few-decodes": ("bandwidth", None, {**BANDWIDTH_H100, **FEW}),
    "cache": ("cache", None, CACHE),
    "capped": ("scheduling", "admission_cap", CAPPED),
    "cpu-overhead": ("scheduling", "cpu_overhead", CPU_BOUND),
    "prefill": ("scheduling", "prefill_interference", COMPUTE),
    "frontend": ("scheduling", "frontend", {**CPU_BOUND, "frontend_cpu_pct": 97.0}),
}
ENGINES = {
    "defaults": {},
    "capped-sync": {"max_num_seqs": 32, "async_scheduling": False},
    "pinned-pool": {"kv_cache_memory_bytes": 2**30, "enable_prefix_caching": True},
    "wide": {"tensor_parallel_size": 2, "enable_prefix_caching": True, "block_size": 32},
    "no-prefix-cache": {"enable_prefix_caching": False},
    "whole-experts": {"tensor_parallel_size": 4, "enable_expert_parallel": True},
}
SLO = Slo.model_validate({"default": {"ttft_p99_ms": 1000, "itl_p95_ms": 40}})


class Asked:
    """One situation a rule is asked in, with what pruning passes it."""

    def __init__(self, label: str, situation: Situation, gpus: int) -> None:
        self.label, self.situation, self.gpus = label, situation, gpus
        self.held = held_conditions(situation.observation)


def _hand_built() -> list[Asked]:
    found = []
    combos = itertools.product(
        READINGS.items(),
        ("h100-sxm", "a100-80gb-sxm", "cpu"),
        (("llama-3.1-8b", 1), ("llama-3.2-1b", 1), ("qwen3-30b-a3b", 4)),
        (CHAT, RAG),
        ENGINES.items(),
    )
    for (name, (binding, kind, signals)), gpu, (model, gpus), workload, (e, engine) in combos:
        spec = MODELS[model]
        below = point(signals, violations=(), achieved=8.0)
        observation = Observation(
            saturated=point(signals), below=below, gpu=GPUS[gpu], model=spec,
            engine=EngineConfig(model=spec.name, **engine), workload=workload, slo=SLO,
        )  # fmt: skip
        diagnosis = Diagnosis(binding=binding, confidence=0.9, scheduling_kind=kind)  # type: ignore[arg-type]
        situation = situation_of(diagnosis, context_of(observation))
        if situation is not None:
            label = f"{name}/{gpu}/{model}/{workload.name}/{e}"
            found.append(Asked(label, situation, gpus))
    return found


def _recorded() -> list[Asked]:
    found = []
    for recording in find_recorded([REPO / "tests" / "fixtures" / "real"]):
        study, result = recording.study, recording.result
        observation = observe_study(study, result.config, result)
        context = context_of(observation)
        situation = situation_of(diagnose(context), context)
        if situation is not None:
            found.append(Asked(f"real:{recording.name}", situation, study.gpus))
    return found


@cache
def situations() -> tuple[Asked, ...]:
    return (*_recorded(), *_hand_built())


@cache
def _answers(knob: str) -> list[tuple[str, Effect | str, Effect | str, Situation]]:
    """``knob``'s rule asked twice in each situation under each constraint: (where, first
    answer, second answer, the situation it was asked in)."""
    spec = next(k for k in CATALOGUE.knobs if k.name == knob)
    rule = PRICING_RULES[knob]
    found = []
    for at, constraint in itertools.product(situations(), get_args(Constraint)):
        _, _, sit = asked(spec, aimed_at(at.situation, constraint), at.held, at.gpus)
        found.append((f"{at.label} as {constraint}", rule(sit), rule(sit), sit))
    return found


RULED = sorted(k.name for k in CATALOGUE.knobs if k.name in PRICING_RULES)


def test_every_catalogue_knob_with_a_rule_is_in_the_suite() -> None:
    assert set(PRICING_RULES) <= {k.name for k in CATALOGUE.knobs}
    assert len(situations()) > 100


@pytest.mark.parametrize("knob", RULED)
def test_a_rule_answers_a_bounded_ratio_or_one_line_why(knob: str) -> None:
    for where, answer, _, sit in _answers(knob):
        assert isinstance(answer, Effect | str), f"{where}: {answer!r}"
        if isinstance(answer, str):
            assert answer.strip() and "\n" not in answer, f"{where}: {answer!r}"
            continue
        assert answer.direction in get_args(Direction), f"{where}: {answer}"
        assert math.isfinite(answer.ratio), f"{where}: {answer}"
        assert _lowest(knob) <= answer.ratio <= _highest(knob, sit, answer), f"{where}: {answer}"
        assert answer.reason.strip() and "\n" not in answer.reason, f"{where}: {answer}"


PER_GPU = frozenset({"tensor_parallel_size", "data_parallel_size"})
"""Knobs that change the GPUs a server holds: their ratio is per GPU, so a narrower server
may gain by the GPUs it gives back on top of the damped ratio."""


def _lowest(knob: str) -> float:
    return 0.0 if knob in PER_GPU else 0.5


def _highest(knob: str, sit: Situation, effect: Effect) -> float:
    """``MAX_RATIO``, times the GPUs given back for a per-GPU knob."""
    now = getattr(sit.engine, knob, 1)
    new = effect.target if isinstance(effect.target, int) else now
    return MAX_RATIO * (max(1.0, now / new) if knob in PER_GPU else 1.0)


@pytest.mark.parametrize("knob", RULED)
def test_a_rule_is_pure(knob: str) -> None:
    for where, first, second, sit in _answers(knob):
        assert repr(first) == repr(second), where
        before = sit.observation.model_dump_json()
        PRICING_RULES[knob](sit)
        assert sit.observation.model_dump_json() == before, where


@pytest.mark.parametrize("knob", RULED)
def test_the_suite_reaches_every_rules_price(knob: str) -> None:
    """A rule never priced here would pass the other contracts vacuously."""
    assert any(isinstance(answer, Effect) for _, answer, _, _ in _answers(knob))


def _ceiling(observation: Observation) -> float | None:
    found = [c.ratio for c in (latency_ceiling(observation), compute_ceiling(observation)) if c]
    return min(found, default=None)


def test_a_kept_batch_growing_move_is_priced_within_the_measured_ceilings() -> None:
    checked = 0
    for at in situations():
        observation = at.situation.observation
        ceiling = _ceiling(observation)
        if ceiling is None:
            continue
        pruning = prune(at.situation.diagnosis, context_of(observation), CATALOGUE, gpus=at.gpus)
        for c in pruning.candidates:
            grows = c.knob.name in GROWING and c.direction != "down"
            if grows and c.relieves in RELIEVED_BY_ROOM:
                checked += 1
                assert c.predicted_ratio <= ceiling + 1e-3, f"{at.label}: {c.knob.name} {c}"
    assert checked > 0
