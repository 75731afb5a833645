"""What prefix caching saves, from the workload's shared prefixes and the KV pool's room."""

from __future__ import annotations

import pytest

from kneepoint.load import plan_requests
from kneepoint.policies.pruning.prefix_savings import prefix_reuse
from kneepoint.records import Workload
from tests.support.pruned import CHAT, RAG


def test_a_resident_corpus_serves_its_whole_prefix_share() -> None:
    # RAG: 20 documents of 2000 tokens (40k) fit in half of a 100k pool; prompts are
    # 2000 shared + 100 own tokens, answers 100.
    reuse = prefix_reuse(RAG, kv_tokens=100_000)
    assert reuse.prompt_share == pytest.approx(2000 / 2100)
    assert reuse.context_before_tokens == pytest.approx(2150)
    assert reuse.context_after_tokens == pytest.approx(150)
    # All-prefill steps would shrink to 100/2100 of their work; the ratio stops at 20x
    # (work never priced below 5%: the fixed costs of a step stay).
    assert reuse.prefill_ratio(1.0) == pytest.approx(20.0)
    assert reuse.prefill_ratio(0.5) == pytest.approx(1 / (1 - 0.5 * 2000 / 2100))


def test_a_corpus_larger_than_the_pool_keeps_only_what_fits() -> None:
    # 40k tokens of documents, 20k of room for them: half stay resident (uniform popularity).
    reuse = prefix_reuse(RAG, kv_tokens=40_000)
    assert reuse.prompt_share == pytest.approx(0.5 * 2000 / 2100)


def test_no_shared_prefixes_save_nothing() -> None:
    reuse = prefix_reuse(CHAT, kv_tokens=100_000)
    assert reuse.prompt_share == 0.0
    assert reuse.kv_ratio == pytest.approx(1.0)


def _cycled(documents: int) -> Workload:
    groups = [
        {"name": "prompts", "documents": documents, "prefix_tokens": 560, "popularity": "cycle"}
    ]
    cls = {
        "name": "c",
        "prefix_group": "prompts",
        "input_tokens": {"kind": "fixed", "tokens": 15},
        "output_tokens": {"kind": "fixed", "tokens": 248},
    }
    return Workload.model_validate({"name": "w", "prefix_groups": groups, "classes": [cls]})


def test_a_cycled_corpus_is_sent_in_turn() -> None:
    # inference-perf's shared-prefix corpus: request n carries prompt n mod 100.
    plan = plan_requests(_cycled(100), 10.0, num_requests=250, seed=3)
    assert [p.prefix_id for p in plan[:3]] == ["prompts/0", "prompts/1", "prompts/2"]
    assert [p.prefix_id for p in plan] == [f"prompts/{i % 100}" for i in range(250)]
    assert plan[0].prompt[:560] == plan[100].prompt[:560] != plan[1].prompt[:560]
    assert plan[0].prompt[560:] != plan[100].prompt[560:]  # the own tokens are each request's
    # Another point (seed) starts again from the first, as each inference-perf stage does.
    assert plan_requests(_cycled(100), 5.0, num_requests=1, seed=4)[0].prefix_id == "prompts/0"


def test_a_cycled_corpus_too_large_for_the_pool_is_never_found_cached() -> None:
    # In turn, each document comes back after all the others: least recently used, it is
    # the one evicted. 56k tokens of documents against 28k of room: no hits (a random draw
    # would find half of them), and all of them when the room holds the corpus.
    assert prefix_reuse(_cycled(100), kv_tokens=56_000).prompt_share == 0.0
    assert prefix_reuse(_cycled(100), kv_tokens=112_000).prompt_share == pytest.approx(560 / 575)
