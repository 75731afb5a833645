"""A quality spot-check: fixed prompts, greedy decoding, the tokens each configuration returns.

Output-changing knobs (fp8 weights, fp8 KV) are accepted only when a challenger's greedy
answers to the same prompts agree with the incumbent's closely enough. Tokens come from the
completions API's logprobs (one entry per generated token), so agreement is counted token by
token, position by position, without a tokenizer on our side.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from kneepoint.probes.client.openai_wire import bearer
from kneepoint.probes.client.tls import tls_context
from kneepoint.records import KneepointError

PROMPTS = (
    "The capital of France is",
    "Water boils at a temperature of",
    "The three primary colours are",
    "In computer science, a hash table is",
    "The theory of general relativity describes",
    "To make a cup of tea, first",
    "The largest planet in the solar system is",
    "A prime number is a number that",
    "The French Revolution began in",
    "Photosynthesis converts sunlight into",
    "The Pythagorean theorem states that",
    "An electric motor works by",
)


class QualityCheckError(KneepointError, RuntimeError):
    """The server did not answer a quality prompt."""


def greedy_outputs(
    url: str,
    model: str,
    prompts: Sequence[str],
    max_tokens: int,
    timeout_s: float = 120.0,
    *,
    api_key: str | None = None,
) -> list[tuple[str, ...]]:
    """Each prompt's greedy continuation, as the server's generated tokens."""
    outputs = []
    with httpx.Client(
        base_url=url, timeout=timeout_s, headers=bearer(api_key), verify=tls_context()
    ) as client:
        for prompt in prompts:
            body = {
                "model": model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "logprobs": 0,
                "seed": 0,
            }
            try:
                response = client.post("/v1/completions", json=body)
                response.raise_for_status()
                logprobs = response.json()["choices"][0]["logprobs"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                raise QualityCheckError(f"quality prompt {prompt!r}: {exc}") from exc
            if not logprobs or "tokens" not in logprobs:
                raise QualityCheckError(f"quality prompt {prompt!r}: no tokens in logprobs")
            outputs.append(tuple(str(t) for t in logprobs["tokens"]))
    return outputs


def token_agreement(
    reference: Sequence[Sequence[str]], candidate: Sequence[Sequence[str]]
) -> float:
    """Share of tokens equal at the same position, over all prompts (1.0: identical)."""
    same = total = 0
    for ref, got in zip(reference, candidate, strict=True):
        total += max(len(ref), len(got))
        same += sum(a == b for a, b in zip(ref, got, strict=False))
    return same / total if total else 1.0
