"""How vLLM's hybrid KV cache manager lays a model's layers out in one pool of blocks.

vLLM V1 (vllm/v1/core/kv_cache_utils.py, ``get_kv_cache_groups``) puts a model whose layers
all attend alike in one KV cache group. A model mixing full-attention and sliding-window
layers gets groups of equal size, each of one kind
(``_get_kv_cache_groups_uniform_page_size``): the group size is the smaller layer count (the
"1" of Gemma 3's 5:1 pattern), or the larger one when the two are within 1.5x of each other
(gpt-oss: 12 + 12); the last group of a kind is padded. One pool block holds ``block_size``
tokens of one group, so its bytes span ``group size`` layers (``get_kv_cache_config_from_groups``,
``get_num_blocks``), and every group draws blocks from the same pool. A request holds
``ceil(L / block)`` blocks in each full-attention group, and in each sliding group only the
blocks still inside the window (``SlidingWindowManager.get_num_skipped_tokens``: tokens before
``computed - window + 1`` are freed). vLLM logs the pool as ``num_blocks // groups x
block_size`` tokens (``_report_kv_cache_config``): the tokens one request could hold if every
group kept all of them.
"""

from __future__ import annotations

from pydantic import Field

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.records import ModelSpec, Record

GROUP_SIZE_SLACK = 1.5
"""vLLM pads to the larger layer count when it is under 1.5x the smaller one
(``_get_kv_cache_groups_uniform_page_size``: "1.5 is a heuristic to avoid too many padding
layers")."""


class KvLayout(Record):
    """The KV cache groups of one model under one engine configuration."""

    layers_per_group: int = Field(ge=1)
    full_groups: int = Field(ge=0)
    sliding_groups: int = Field(ge=0)
    window_tokens: int = Field(ge=0)
    """The sliding window (0 when no group slides)."""
    block_size: int = Field(ge=1)
    block_bytes: float = Field(gt=0.0)
    """One pool block: ``block_size`` tokens of KV over ``layers_per_group`` layers."""

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups

    def num_blocks(self, kv_bytes: float) -> int:
        """Blocks the pool gets from ``kv_bytes`` of KV memory."""
        return max(0, int(kv_bytes // self.block_bytes))

    def logged_tokens(self, num_blocks: int) -> int:
        """The pool as vLLM logs it: "GPU KV cache size: N tokens"."""
        return num_blocks // self.groups * self.block_size

    def blocks_held(self, tokens: int) -> int:
        """Blocks a request holds once ``tokens`` tokens have a slot: all of them in full
        groups, those not yet before ``tokens - window`` in sliding groups."""
        size = self.block_size
        positions = -(-tokens // size)
        skipped = max(0, tokens - self.window_tokens) // size if self.sliding_groups else 0
        return self.full_groups * positions + self.sliding_groups * (positions - skipped)

    def tokens_holding(self, blocks: float) -> float:
        """About how many tokens a request holding ``blocks`` blocks has (the inverse of
        ``blocks_held``, block rounding aside); a request past the window of a model whose
        every layer slides reads as the window."""
        window_blocks = self.window_tokens / self.block_size
        if not self.sliding_groups or blocks <= self.groups * window_blocks:
            return blocks / self.groups * self.block_size
        if not self.full_groups:
            return float(self.window_tokens)
        beyond = blocks - self.sliding_groups * window_blocks
        return beyond / self.full_groups * self.block_size

    def blocks_per_request_max(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` tokens may need at its peak, as vLLM's
        ``get_max_concurrency_for_kv_cache_config`` counts them: a sliding group holds the
        window plus one step's tokens, plus a block for a window that starts mid-block
        (``SlidingWindowSpec.max_memory_usage_bytes``)."""
        size = self.block_size
        full = -(-max_model_len // size)
        window = min(self.window_tokens - 1 + max_num_batched_tokens, max_model_len)
        sliding = -(-window // size) + 1
        return self.full_groups * full + self.sliding_groups * sliding


def kv_layout(model: ModelSpec, engine: ResolvedEngine) -> KvLayout:
    """The KV cache groups vLLM forms for ``model`` under ``engine``."""
    sliding, full = model.sliding_window_layers, model.full_attention_layers
    if not sliding or not full:  # one kind of layer: one group of all of them
        group_size, full_groups, sliding_groups = model.num_layers, int(full > 0), int(sliding > 0)
    else:
        group_size = min(full, sliding)
        if max(full, sliding) < group_size * GROUP_SIZE_SLACK:
            group_size = max(full, sliding)
        full_groups, sliding_groups = -(-full // group_size), -(-sliding // group_size)
    per_token = model.kv_bytes_per_token(
        engine.kv_dtype_bytes, engine.tensor_parallel_size, layers=group_size
    )
    return KvLayout(
        layers_per_group=group_size,
        full_groups=full_groups,
        sliding_groups=sliding_groups,
        window_tokens=model.window_tokens if sliding_groups else 0,
        block_size=engine.block_size,
        block_bytes=per_token * engine.block_size,
    )
