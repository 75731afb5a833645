"""What prefix caching saves, from the workload's shared prefixes and the KV pool's room."""

from __future__ import annotations

import pytest

from kneepoint.policies.pruning.prefix_savings import prefix_reuse
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
