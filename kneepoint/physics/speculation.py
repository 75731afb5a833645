"""Speculative decoding's yield, from acceptance: tokens per verified draft, and what a draft
of k tokens does to a step's throughput at a given batch.

A draft of k tokens is verified in one target step; its i-th token counts only where every
one before it was accepted. With per-position acceptance shares p_1 >= p_2 >= ... (vLLM's
``spec_decode_num_accepted_tokens_per_pos`` over its drafts), a draft yields
1 + p_1 + ... + p_k tokens, the target's own token included. With one acceptance rate a for
every position, independent, that is (1 - a^(k+1)) / (1 - a) (Leviathan, Kalman and Matias
2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1).

The price is paid in the step: each draft adds k tokens the target verifies. Where the step
time grows as tokens^elasticity (the server's own points, ``ServerResponse``), a batch whose
steps carry T tokens, d of whose B sequences draft, takes ((T + B d k) / T)^elasticity as long,
for 1 + d (E - 1) times the output tokens. A small batch whose step streams the weights
whatever it carries (elasticity near 0) gains nearly all of E; a full, compute-bound batch
(elasticity near 1) pays for every verified token and loses what is rejected: the reason
speculation helps latency-bound decode and hurts a full batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.records import EngineConfig

SYNC_METHODS = frozenset({"ngram", "suffix", "medusa", "mlp_speculator"})
"""Methods with which vLLM turns async scheduling off ("Async scheduling not supported with
ngram-based speculative decoding and will be disabled": vLLM 0.32, config/vllm.py; EAGLE,
MTP, draft models and the GPU n-gram keep it)."""
MIN_RATIO = 0.05
"""The smallest ratio of successive positions' shares an extrapolation carries on (a draft
whose second token is almost never accepted gains nothing from a third)."""


def tokens_per_draft(accepted_by_position: Sequence[float], k: int) -> float:
    """Tokens a verified draft of ``k`` yields: 1 + the first k positions' shares."""
    return 1.0 + sum(shares_through(accepted_by_position, k))


def shares_through(accepted_by_position: Sequence[float], k: int) -> list[float]:
    """The first ``k`` positions' acceptance shares. Positions past those measured carry on
    the last measured ratio between neighbours (a draft's acceptance falls geometrically in
    the independent model); none measured, none accepted."""
    shares = list(accepted_by_position)
    if not shares:
        return [0.0] * k
    ratio = shares[-1] / shares[-2] if len(shares) > 1 and shares[-2] > 0 else shares[-1]
    ratio = min(1.0, max(MIN_RATIO, ratio))
    while len(shares) < k:
        shares.append(shares[-1] * ratio)
    return shares[:k]


@dataclass(frozen=True, slots=True)
class Drafting:
    """One speculative setting as a step sees it: ``k`` draft tokens (0: off), drafted by
    ``share`` of the decoding sequences each step, each verified draft yielding ``tokens``."""

    k: int
    share: float
    tokens: float

    @property
    def gain(self) -> float:
        """Output tokens per decoding sequence-step."""
        return 1.0 + self.share * (self.tokens - 1.0) if self.k > 0 else 1.0

    @property
    def verified(self) -> float:
        """Tokens the target runs per decoding sequence-step."""
        return 1.0 + self.share * self.k if self.k > 0 else 1.0


def throughput_ratio(
    now: Drafting,
    then: Drafting,
    *,
    batch: float,
    step_tokens: float,
    elasticity: float,
) -> float:
    """Requests per second under ``then`` over under ``now``, at the knee's step: ``batch``
    decoding sequences in steps of ``step_tokens`` tokens (prefills and verified decodes)
    whose time grows as tokens^``elasticity``. A step that yields more tokens per sequence
    finishes requests faster, so it must also take in their prompts faster: the prefill
    tokens a step carries grow with the gain, as the verified decode tokens grow with the
    draft length."""
    if step_tokens <= 0.0 or batch <= 0.0:
        return 1.0
    grown = then.gain / now.gain
    tokens = step_tokens_then(now, then, batch=batch, step_tokens=step_tokens)
    return grown / float((tokens / step_tokens) ** max(0.0, elasticity))


def step_tokens_then(now: Drafting, then: Drafting, *, batch: float, step_tokens: float) -> float:
    """Tokens the knee's step carries under ``then``: its prefills grown with the gain, its
    decodes verifying ``then``'s drafts."""
    prefill = max(0.0, step_tokens - batch * now.verified)
    return prefill * then.gain / now.gain + batch * then.verified


def drafter_free(engine: EngineConfig) -> EngineConfig:
    """The engine as the memory model and the roofline resolve it: n-gram speculation looks
    its drafts up in the context, so it adds no weights and no KV (its verified tokens are
    read from the server's own step counters). A model drafter is left in, and refused."""
    spec = engine.speculative_config
    if spec is not None and spec.get("method") == "ngram":
        return engine.replace(speculative_config=None)
    return engine
