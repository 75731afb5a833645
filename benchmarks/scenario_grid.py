"""Simulator scenarios for the policy benchmarks: models, GPUs, workloads and configurations.

Each scenario is a study built in code from one of five traffic archetypes (prefill-heavy
summarisation, long streamed answers, short chat under a sequence cap, short chat with the CPU
in the way, long-running agents in a small KV pool), or, apart, from one of two conversational
ones (multi-turn chat whose histories grow in a small KV pool, agent loops of many short turns
on a long shared context) or a speculating one (code edits served with n-gram drafts) or a
library of long documents in a small pool (offloading to host memory or not), on a model and
GPU drawn so that it fits,
with the knobs perturbed per draw. The archetype only makes a scenario likely to bind somewhere;
its label comes from the simulator's ground truth at the knee, and the diagnosis never sees
either. Deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.memory import plan_memory
from kneepoint.records.study import StudySpec

Recipe = Callable[[random.Random], dict[str, Any]]
GPUS = gpu_catalogue()
MODELS = model_catalogue()


@dataclass(frozen=True)
class Scenario:
    name: str
    archetype: str
    study: StudySpec
    start_rps: float


def _lognormal(median: int, sigma: float, low: int, high: int) -> dict[str, Any]:
    return {"kind": "lognormal", "median_tokens": median, "sigma": sigma,
            "min_tokens": low, "max_tokens": high}  # fmt: skip


def _prefill(rng: random.Random) -> dict[str, Any]:
    return {
        "models": ["llama-3.1-8b", "mistral-7b", "qwen2.5-14b"],
        "gpus": ["h100-sxm", "h200-sxm", "a100-80gb-sxm", "l40s", "rtx-6000-ada"],
        "input": _lognormal(rng.choice([1500, 2500, 3500]), 0.3, 512, 6000),
        "output": {"kind": "uniform", "min_tokens": 4, "max_tokens": rng.choice([8, 16, 32])},
        "slo": {"ttft_p99_ms": rng.choice([1500, 2500, 4000])},
        "engine": {"max_num_batched_tokens": rng.choice([4096, 8192]), "max_model_len": 8192},
        "start": 2.0,
    }


def _decode(rng: random.Random) -> dict[str, Any]:
    return {
        "models": ["llama-3.1-8b", "mistral-7b", "qwen2.5-14b"],
        "gpus": ["l40s", "a100-80gb-sxm", "l4", "rtx-6000-ada", "h100-sxm"],
        "input": _lognormal(rng.choice([256, 512]), 0.5, 32, 2048),
        "output": _lognormal(rng.choice([512, 768, 1024]), 0.4, 128, 2048),
        "slo": {"ttft_p99_ms": 3000, "itl_p95_ms": rng.choice([30, 40, 60])},
        "engine": {"max_num_batched_tokens": 2048, "max_model_len": 8192},
        "start": 0.5,
    }


def _capped(rng: random.Random) -> dict[str, Any]:
    return {
        "models": ["llama-3.2-1b"],
        "gpus": ["h100-sxm", "h200-sxm", "a100-80gb-sxm"],
        "input": _lognormal(rng.choice([96, 128, 192]), 0.6, 16, 1024),
        "output": _lognormal(rng.choice([96, 128, 192]), 0.5, 16, 512),
        "slo": {"ttft_p99_ms": rng.choice([400, 500, 800]), "itl_p95_ms": 30},
        "engine": {"max_num_seqs": rng.choice([16, 24, 32, 48]), "max_model_len": 4096,
                   "max_num_batched_tokens": 2048, "async_scheduling": rng.random() < 0.5},
        "start": 8.0,
    }  # fmt: skip


def _cpu(rng: random.Random) -> dict[str, Any]:
    return {
        "models": ["llama-3.2-1b"],
        "gpus": ["h100-sxm", "h200-sxm"],
        "input": _lognormal(rng.choice([64, 96, 128]), 0.5, 16, 512),
        "output": _lognormal(rng.choice([128, 192, 256]), 0.5, 16, 512),
        "slo": {"ttft_p99_ms": 1000, "itl_p95_ms": rng.choice([6, 8, 10])},
        "engine": {"max_num_seqs": 512, "max_model_len": 4096, "max_num_batched_tokens": 2048,
                   "async_scheduling": False, "stream_interval": 1},
        "start": 16.0,
    }  # fmt: skip


def _agents(rng: random.Random) -> dict[str, Any]:
    return {
        "models": ["llama-3.2-1b", "llama-3.1-8b", "mistral-7b"],
        "gpus": ["a100-80gb-sxm", "h100-sxm", "l40s", "h200-sxm"],
        "input": _lognormal(rng.choice([128, 256, 512]), 0.5, 16, 1024),
        "output": _lognormal(rng.choice([1000, 1500, 2000]), 0.3, 256, 4096),
        "slo": {"ttft_p99_ms": 10000, "itl_p95_ms": rng.choice([60, 80, 100])},
        "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 4096, "max_model_len": 16384,
                   "kv_cache_memory_bytes": rng.choice([1, 2, 3]) * 2**30},
        "start": 1.0,
    }  # fmt: skip


def _chat_sessions(rng: random.Random) -> dict[str, Any]:
    """Conversations whose histories grow in a KV pool of a few GiB (multiturn-chat's shape;
    pools of 1-2 GiB left the truth split between the cache and bandwidth)."""
    return {
        "models": ["llama-3.1-8b", "mistral-7b", "qwen2.5-14b"],
        "gpus": ["h100-sxm", "a100-80gb-sxm", "l40s", "h200-sxm"],
        "input": _lognormal(rng.choice([48, 96, 192]), 0.9, 4, 512),
        "output": _lognormal(rng.choice([160, 256, 384]), 0.7, 8, 768),
        "slo": {"ttft_p99_ms": 3000, "itl_p95_ms": rng.choice([60, 80, 100])},
        "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 4096, "max_model_len": 16384,
                   "kv_cache_memory_bytes": rng.choice([4, 8, 16]) * 2**30},
        "system": (1, rng.choice([256, 512, 1024])),
        "session": {"turns": {"kind": "geometric", "mean_turns": rng.choice([3.0, 5.0]),
                              "max_turns": 10},
                    "think_time": {"kind": "lognormal", "median_s": rng.choice([2.0, 4.0]),
                                   "sigma": 0.8, "max_s": 30.0}},
        "start": 2.0,
    }  # fmt: skip


def _agent_sessions(rng: random.Random) -> dict[str, Any]:
    """Agent loops: many short turns on a long shared context (agentic's shape)."""
    return {
        "models": ["llama-3.2-1b", "llama-3.1-8b", "mistral-7b"],
        "gpus": ["h100-sxm", "a100-80gb-sxm", "l40s", "h200-sxm", "rtx-6000-ada"],
        "input": {"kind": "uniform", "min_tokens": 120, "max_tokens": rng.choice([160, 400])},
        "output": {"kind": "uniform", "min_tokens": 40, "max_tokens": rng.choice([120, 200])},
        "slo": {"ttft_p99_ms": rng.choice([1000, 2000]), "itl_p95_ms": rng.choice([40, 60])},
        "engine": {"max_num_seqs": rng.choice([64, 256]), "max_num_batched_tokens": 8192,
                   "max_model_len": 16384, "enable_prefix_caching": rng.random() < 0.7},
        "system": (rng.choice([1, 4, 16]), rng.choice([1536, 4096])),
        "session": {"turns": {"kind": "uniform", "min_turns": 8, "max_turns": 16},
                    "think_time": {"kind": "fixed", "seconds": rng.choice([0.5, 1.0])}},
        "start": 2.0,
    }  # fmt: skip


def _drafting(rng: random.Random) -> dict[str, Any]:
    """Long answers that repeat much of their context (edits, summaries that quote), served
    with n-gram drafts on: its steps verify drafts beside their decodes, and async scheduling
    is off. Acceptance
    around the published code-edit one (vllm-project/vllm PR #24344: 55% of decoding steps
    drafted, 0.81 falling to 0.66 by position)."""
    first, keep = rng.choice([0.6, 0.8]), rng.choice([0.9, 0.97])
    k = rng.choice([2, 3, 5])
    return {
        "models": ["llama-3.1-8b", "mistral-7b", "qwen2.5-14b"],
        "gpus": ["a100-80gb-sxm", "l40s", "rtx-6000-ada", "h100-sxm"],
        "input": _lognormal(rng.choice([256, 512]), 0.4, 64, 2048),
        "output": _lognormal(rng.choice([512, 768]), 0.4, 64, 2048),
        "slo": {"ttft_p99_ms": 2000, "tpot_p95_ms": rng.choice([20, 30, 40])},
        "engine": {"max_num_batched_tokens": 2048, "max_model_len": 8192,
                   "speculative_config": {"method": "ngram", "num_speculative_tokens": k,
                                          "prompt_lookup_max": 4}},
        "speculation": {"drafted_share": rng.choice([0.3, 0.55, 0.8]),
                        "accepted_by_position": [first * keep**i for i in range(k)]},
        "start": 1.0,
    }  # fmt: skip


def _library(rng: random.Random) -> dict[str, Any]:
    """Questions over a library of long documents that outgrows a small KV pool (a GPU
    shared with another service), with vLLM's KV offloading off or 16-64 GiB of host memory
    beside the pool (configs/scenarios/document-qa.yaml's traffic, drawn around it): most of
    a step is prefill computed again where the pool evicts, and the pool holds the batch
    where host memory brings the prefixes back."""
    return {
        "models": ["llama-3.1-8b", "mistral-7b", "qwen2.5-14b"],
        "gpus": ["a100-80gb-sxm", "h100-sxm"],
        "library": (rng.choice([40, 64]), rng.choice([4096, 6144])),
        "input": _lognormal(96, 0.5, 16, 512),
        "output": _lognormal(rng.choice([96, 192]), 0.5, 16, 768),
        "slo": {"ttft_p99_ms": 3000, "itl_p95_ms": rng.choice([60, 100])},
        "engine": {"gpu_memory_utilization": rng.choice([0.3, 0.35]),
                   "max_num_batched_tokens": 4096, "max_model_len": 16384,
                   "kv_offloading_size": rng.choice([None, 16, 64])},
        "start": 1.0,
    }  # fmt: skip


def _wide(rng: random.Random) -> dict[str, Any]:
    """A model that fits one GPU served as one wide server across four or eight NVLink GPUs
    (configs/studies/llama8b-8gpu.yaml, drawn around it): its CPU-side step dominates, and the
    right lever is a narrower server with the rest of the node as replicas."""
    tp = rng.choice([4, 8])
    return {
        "models": ["llama-3.2-1b", "llama-3.1-8b", "mistral-7b"],
        "gpus": ["h100-sxm", "h200-sxm"],
        "node": tp,
        "input": _lognormal(rng.choice([128, 256, 512]), 0.7, 16, 2048),
        "output": _lognormal(rng.choice([128, 256]), 0.7, 16, 1024),
        "slo": {"ttft_p99_ms": 1000, "itl_p95_ms": rng.choice([30, 50])},
        "engine": {"tensor_parallel_size": tp, "max_model_len": 8192},
        "start": 20.0,
    }  # fmt: skip


FRONTEND_CHUNK_S = 85e-6
"""The API server's work per streamed chunk that replays the real H100 recordings' 40 req/s
token pace (tests/test_frontend.py; configs/scenarios/frontend-bound.yaml)."""


def _frontend(rng: random.Random) -> dict[str, Any]:
    """A small model streaming long answers behind one API server
    (configs/scenarios/frontend-bound.yaml, drawn around it): each step of a few milliseconds
    hands the server a chunk per running request, more than its one event loop streams in
    the step's time; --api-server-count is the lever."""
    return {
        "models": ["llama-3.2-1b"],
        "gpus": ["h100-sxm", "h200-sxm", "a100-80gb-sxm"],
        "input": _lognormal(rng.choice([128, 256]), 0.5, 16, 1024),
        "output": _lognormal(rng.choice([256, 384, 512]), 0.4, 32, 1024),
        "slo": {"ttft_p99_ms": 1000, "itl_p95_ms": rng.choice([40, 50])},
        "engine": {"max_num_seqs": rng.choice([128, 256]), "max_model_len": 4096},
        "frontend_chunk_s": FRONTEND_CHUNK_S,
        "start": 16.0,
    }  # fmt: skip


FRONTEND_ARCHETYPES = {"frontend": _frontend}
"""Front-end-bound servers, drawn apart likewise."""
SESSION_ARCHETYPES = {"chat-sessions": _chat_sessions, "agent-sessions": _agent_sessions}
"""Conversational traffic, drawn apart from the others (``session_scenarios``) so that the
earlier archetypes' draws stay as they were."""
DRAFTING_ARCHETYPES = {"drafting": _drafting}
"""Speculating servers, drawn apart likewise."""
LIBRARY_ARCHETYPES = {"library": _library}
"""Prefix-heavy libraries in a small pool, offloading to host memory or not, drawn apart
likewise."""
WIDE_ARCHETYPES = {"wide": _wide}
"""Small models on wide tensor-parallel servers, drawn apart likewise."""

ARCHETYPES = {
    "prefill": _prefill, "decode": _decode, "capped": _capped, "cpu": _cpu, "agents": _agents,
}  # fmt: skip


def _study(name: str, rng: random.Random, recipe: dict[str, Any]) -> StudySpec | None:
    gpu, model = GPUS[rng.choice(recipe["gpus"])], MODELS[rng.choice(recipe["models"])]
    traffic: dict[str, Any] = {"name": "c", "input_tokens": recipe["input"],
                               "output_tokens": recipe["output"]}  # fmt: skip
    groups = []
    if "session" in recipe:
        documents, tokens = recipe["system"]
        groups = [{"name": "system", "documents": documents, "prefix_tokens": tokens}]
        traffic |= {"session": recipe["session"], "prefix_group": "system"}
    if "speculation" in recipe:
        traffic["speculation"] = recipe["speculation"]
    if "library" in recipe:
        documents, tokens = recipe["library"]
        groups = [{"name": "library", "documents": documents, "prefix_tokens": tokens,
                   "popularity": "uniform"}]  # fmt: skip
        traffic["prefix_group"] = "library"
    spec = StudySpec.model_validate({
        "name": name, "seed": rng.randrange(1000), "gpu": gpu, "model": model,
        "gpus": recipe.get("node", 1),
        "engine": {"model": model.name, **recipe["engine"]},
        "workload": {"name": name, "seed": rng.randrange(1000), "classes": [traffic],
                     "prefix_groups": groups},
        "slo": {"default": recipe["slo"]},
        "calibration": _frontend_calibration(gpu.name, model.name, recipe),
    })  # fmt: skip
    plan = plan_memory(gpu, model, resolve_engine(spec.engine, gpu, model))
    return spec if plan.refusal is None else None


def _frontend_calibration(gpu: str, model: str, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The built-in constants with the API server's work per chunk, where the recipe has one."""
    if "frontend_chunk_s" not in recipe:
        return None
    efficiency = {"frontend_chunk_s": recipe["frontend_chunk_s"]}
    return {"gpu": gpu, "model": model, "efficiency": efficiency, "step_error_rel": 0.0}


def scenarios(
    count: int, seed: int = 0, archetypes: dict[str, Recipe] | None = None
) -> Iterator[Scenario]:
    """``count`` scenarios that start, archetypes in turn (``ARCHETYPES`` by default)."""
    archetypes = ARCHETYPES if archetypes is None else archetypes
    rng = random.Random(seed)
    names = sorted(archetypes)
    made = tries = 0
    while made < count and tries < count * 20:
        archetype = names[tries % len(names)]
        tries += 1
        recipe = archetypes[archetype](rng)
        study = _study(f"{archetype}-{made:02d}", rng, recipe)
        if study is not None:
            yield Scenario(study.name, archetype, study, recipe["start"])
            made += 1
