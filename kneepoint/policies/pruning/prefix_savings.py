"""What prefix caching would save on a workload: the share of prompt tokens it serves from the
cache and the KV it stops holding twice, from the workload's shared prefixes and how often
they recur.

A prefix group of D documents of P tokens each is computed once per document while the
documents stay resident; a cache that cannot hold them all keeps a share of them (uniform
popularity: the conservative case, a skewed one keeps its popular documents). The saved
share of prefill work and of KV per running sequence then gives the capacity ratio under
whichever resource binds. Priced so rather than at a constant: a fixed guess ranks prefix
caching behind knobs worth a few percent on a mix whose long prompts share a few sources, where
it serves most prompt tokens from the cache and gains several times over.
"""

from __future__ import annotations

from dataclasses import dataclass

from kneepoint.records import Workload, mean_length_tokens, turn_survival

RESIDENT_SHARE = 0.5
"""Share of the KV pool shared documents may occupy before they evict each other: the rest
holds the running sequences' own tokens."""


@dataclass(frozen=True, slots=True)
class PrefixReuse:
    """What caching the workload's shared prefixes saves (shares between 0 and 1)."""

    prompt_share: float
    """Of all prompt tokens, the share served from the cache."""
    context_before_tokens: float
    """A running sequence's mean KV context without prefix caching."""
    context_after_tokens: float
    """The same with the shared prefixes held once, not once per sequence."""

    @property
    def kv_ratio(self) -> float:
        """How many more sequences the same KV pool holds."""
        return self.context_before_tokens / max(1.0, self.context_after_tokens)

    def prefill_ratio(self, prefill_share: float) -> float:
        """Throughput ratio when ``prefill_share`` of the step work is prompt tokens."""
        return 1.0 / max(0.05, 1.0 - self.prompt_share * prefill_share)


def prefix_reuse(
    workload: Workload,
    kv_tokens: int,
    *,
    block_tokens: int = 16,
    host_tokens: float = 0.0,
) -> PrefixReuse:
    """The savings of prefix caching on ``workload`` with a pool of ``kv_tokens`` in blocks
    of ``block_tokens``. A conversation's later turn finds the turn before it cached (its
    prompt's whole blocks: the answer in the history is the client's, not the blocks the
    server generated). Histories are taken to outlast their think times: on the simulator
    this held where the pool had room (multiturn-chat at 40 req/s, 455k tokens: 69.6%
    predicted, 69.3% simulated) and overstates where it had not (16k tokens at 10 req/s:
    69.6% against 60.1%; agentic at 4 req/s: 92.9% against 67.5%). A Little's-law model of
    least-recently-used eviction over think times read 44.9% and 92.9% there: no better.
    ``host_tokens``: KV offloaded to host memory, which keeps whole documents the pool has
    evicted (a store of every computed block, least recently used out) and serves them back
    as hits; the KV each running sequence holds is the pool's all the same."""
    groups = {g.name: g for g in workload.prefix_groups}
    total_weight = sum(c.weight for c in workload.classes)
    prompt = cached = before = after = turns = 0.0
    for cls in workload.classes:
        share = cls.weight / total_weight
        own = mean_length_tokens(cls.input_tokens)
        answer = mean_length_tokens(cls.output_tokens)
        group = groups.get(cls.prefix_group or "")
        prefix = float(group.prefix_tokens) if group else 0.0
        hit = held = 0.0
        if group is not None:
            corpus = group.documents * group.prefix_tokens
            hit = min(1.0, (RESIDENT_SHARE * kv_tokens + host_tokens) / corpus)
            held = min(1.0, RESIDENT_SHARE * kv_tokens / corpus)
            if group.popularity == "cycle":  # in turn: LRU evicts each before it is back
                hit, held = float(hit == 1.0), float(held == 1.0)
        survival = turn_survival(cls.session.turns) if cls.session is not None else [1.0]
        for t, alive in enumerate(survival):
            weight = share * alive
            history = t * (own + answer)  # earlier messages and answers
            # the turn before's prompt, in whole blocks (half a block lost on average)
            served = max(0.0, prefix + history - answer - block_tokens / 2.0) if t else 0.0
            prompt += weight * (prefix + history + own)
            cached += weight * (served if t else hit * prefix)
            before += weight * (prefix + history + own + answer / 2.0)
            after += weight * ((1.0 - held) * prefix + history + own + answer / 2.0)
            turns += weight
    return PrefixReuse(
        prompt_share=cached / prompt if prompt else 0.0,
        context_before_tokens=before / turns,
        context_after_tokens=after / turns,
    )
