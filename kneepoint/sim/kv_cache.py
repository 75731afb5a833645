"""The paged KV cache with prefix caching, modeled on vLLM V1's KV cache manager.

Blocks hold ``block_size`` tokens and come from a ``BlockPool``. A full block is identified by
a hash chained over all tokens up to its end (``kneepoint.sim.block_hash``), so two requests
share a block only if they share the whole prefix. A request's blocks are freed tail-first,
so its last blocks are evicted before its shared prefix.

A model with sliding-window layers has several KV cache groups drawing on one pool
(``kneepoint.physics.kv_manager``): each block position of a request takes one block in every
group, and the sliding groups' blocks are freed once the position falls out of the window, as
vLLM's ``SlidingWindowManager`` frees them. The first group's blocks are tracked one by one
(``SimRequest.blocks``, with prefix caching); the other groups' are counted, so a prefix hit
stands for a hit in every group and the other groups' blocks evict nothing cached. Blocks
leave the window when the request next allocates (vLLM checks every step: with a window that
is a multiple of the block size, it frees each one step sooner).
"""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.physics import KvLayout
from kneepoint.sim.block_hash import block_hashes
from kneepoint.sim.block_pool import BlockPool
from kneepoint.sim.host_tier import HostTier
from kneepoint.sim.request import SimRequest


class KvCache:
    """Each request's blocks over one pool: allocation, prefix hits, the window, freeing."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        prefix_caching: bool,
        layout: KvLayout | None = None,
        host: HostTier | None = None,
    ) -> None:
        """``layout``: the model's KV cache groups (default: one full-attention group);
        ``host``: host memory blocks are offloaded to (with prefix caching only: the
        connector finds blocks by their hashes)."""
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a KV cache needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.pool = BlockPool(num_blocks)
        self.query_tokens = 0
        self.hit_tokens = 0
        full, sliding = (layout.full_groups, layout.sliding_groups) if layout else (1, 0)
        self.window = layout.window_tokens if layout and sliding else 0
        """The sliding window in tokens (0: no group slides)."""
        self._first_slides = full == 0
        """Whether the tracked first group is a sliding one (a model whose every layer slides)."""
        self._extra_per_position = full + sliding - 1
        """Counted blocks (groups beyond the first) a block position takes."""
        self._extra_per_skip = sliding - 1 if self._first_slides else sliding
        """Counted blocks a position gives back when it falls out of the window."""
        self._extra_used = 0
        self.host = host if prefix_caching else None

    @property
    def num_free(self) -> int:
        return self.pool.free_count - self._extra_used

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, as vLLM's kv_cache_usage_perc (0..1)."""
        return 1.0 - self.num_free / self.num_blocks

    def ref_count(self, block: int) -> int:
        return self.pool.ref[block]

    def cached_prefix(self, req: SimRequest) -> list[int]:
        """Cached blocks matching the request's leading full blocks. At least one token is
        always left to compute, as in vLLM, so the step can produce the next token."""
        if not self.prefix_caching or req.num_computed:
            return []
        limit = (req.num_tokens - 1) // self.block_size
        found: list[int] = []
        for block_hash in block_hashes(req, limit, self.block_size):
            block = self.pool.cached.get(block_hash)
            if block is None:
                break
            found.append(block)
        return found

    def host_prefix(self, req: SimRequest, after: int) -> int:
        """Blocks of the request's prefix past the ``after`` the device holds that host
        memory holds, leading (0 without offloading)."""
        host = self.host
        if host is None or req.num_computed:
            return 0
        limit = (req.num_tokens - 1) // self.block_size
        if limit <= after:
            return 0
        hashes = block_hashes(req, limit, self.block_size)[after:limit]
        return host.matched(hashes)

    def _new_blocks(self, req: SimRequest, num_new: int, prefix: Sequence[int]) -> int:
        """New block positions for ``num_new`` more tokens (<= 0: none)."""
        computed = len(prefix) * self.block_size if prefix else req.num_computed
        return -(-(computed + num_new) // self.block_size) - len(req.blocks) - len(prefix)

    def _skip_at(self, computed: int, positions: int) -> int:
        """Leading positions (of ``positions``) out of the window once ``computed`` tokens are
        in the cache (vLLM: tokens before ``computed - window + 1`` are skipped)."""
        if not self.window:
            return 0
        return min(max(0, computed - self.window + 1) // self.block_size, positions)

    def _skip_for(self, req: SimRequest, prefix: Sequence[int]) -> int:
        """``_skip_at`` for the request's next allocation (after ``prefix``, if admitted)."""
        computed = len(prefix) * self.block_size if prefix else req.num_computed
        return self._skip_at(computed, len(req.blocks) + len(prefix))

    def _needed(self, req: SimRequest, new: int, prefix: Sequence[int], skip: int) -> int:
        """Blocks the pool gives up for ``new`` positions and ``prefix`` cached ones in every
        group, net of those the window frees (positions before ``skip``)."""
        new = max(0, new)
        if not prefix and not self.window:  # the common case, worked out in one line
            return new * (1 + self._extra_per_position)
        untouched = skip if self._first_slides and prefix else 0
        # Cached prefix blocks nobody holds sit in the free queue: taking them uses it up too.
        revived = sum(1 for b in prefix[untouched:] if self.pool.ref[b] == 0)
        gone = max(0, skip - req.skipped_blocks)
        extras = (new + len(prefix)) * self._extra_per_position - gone * self._extra_per_skip
        returned = 0
        if self._first_slides and not prefix:
            held = req.blocks[req.skipped_blocks : skip]
            returned = sum(1 for b in held if self.pool.ref[b] == 1)
        return new + revived + extras - returned

    def blocks_needed(self, req: SimRequest, num_new: int) -> int:
        """Blocks a running request needs for ``num_new`` more tokens (<= 0: none)."""
        new = self._new_blocks(req, num_new, ())
        if new <= 0:
            return new
        return self._needed(req, new, (), self._skip_for(req, ()))

    def fits(self, req: SimRequest, num_new: int, prefix: Sequence[int] = ()) -> bool:
        """Whether ``allocate`` with these arguments would succeed; changes nothing."""
        new_blocks = self._new_blocks(req, num_new, prefix)
        if new_blocks <= 0 and not prefix:
            return True
        return self._needed(req, new_blocks, prefix, self._skip_for(req, prefix)) <= self.num_free

    def allocate(self, req: SimRequest, num_new: int, prefix: Sequence[int] = ()) -> bool:
        """Give ``req`` blocks for ``num_new`` more tokens (after ``prefix`` cached blocks for a
        request being admitted). False, with nothing changed, if the pool cannot."""
        new_blocks = self._new_blocks(req, num_new, prefix)
        if new_blocks <= 0 and not prefix:
            return True  # the common decode step: its last block still has room
        skip = self._skip_for(req, prefix)
        if self._needed(req, new_blocks, prefix, skip) > self.num_free:
            return False
        new_blocks = max(0, new_blocks)
        if prefix:
            self._take_prefix(req, prefix, skip)
        else:
            self.slide(req, skip)
        if new_blocks:
            req.blocks += self.pool.take(new_blocks)
            self._extra_used += new_blocks * self._extra_per_position
        return True

    def _take_prefix(self, req: SimRequest, prefix: Sequence[int], skip: int) -> None:
        """Hold a new request's cached prefix. Where the tracked group slides, positions
        already out of the window stay empty (-1), as vLLM pads them with its null block."""
        untouched = skip if self._first_slides else 0
        for block in prefix[untouched:]:
            self.pool.hold(block)
        req.blocks.extend([-1] * untouched)
        req.blocks.extend(prefix[untouched:])
        req.num_cached_blocks = max(req.num_cached_blocks, len(prefix))
        self._extra_used += len(prefix) * self._extra_per_position - skip * self._extra_per_skip
        req.skipped_blocks = skip

    def slide(self, req: SimRequest, skip: int) -> None:
        """Free the sliding groups' blocks of positions before ``skip``, out of the window."""
        start = req.skipped_blocks
        if skip <= start:
            return
        if self._first_slides:
            blocks = req.blocks
            for i in range(start, skip):
                self.pool.release(blocks[i])
                blocks[i] = -1
        self._extra_used -= (skip - start) * self._extra_per_skip
        req.skipped_blocks = skip

    @property
    def blocks_per_position(self) -> int:
        """Blocks one more block position takes over all groups (before the window frees)."""
        return 1 + self._extra_per_position

    def extend_all(self, grown: Sequence[SimRequest], computed_tokens: Sequence[int]) -> None:
        """Give each decoding request (its last block full, ``computed_tokens`` in the cache)
        one more block position, in order, as ``allocate`` would (the caller has checked the
        pool), freeing what falls out of the window. The blocks come in one draw: what the
        window frees goes to the free queue's tail, behind every block drawn here, so freeing
        first changes nothing. Without a window, ``take_positions`` is all it takes."""
        for req, computed in zip(grown, computed_tokens, strict=True):
            self.slide(req, self._skip_at(computed, len(req.blocks)))
        for req, block in zip(grown, self.take_positions(len(grown)), strict=True):
            req.blocks.append(block)

    def take_positions(self, count: int) -> list[int]:
        """Blocks for ``count`` more block positions: the first group's, counted in every
        group (the caller has checked the pool and appends them)."""
        self._extra_used += count * self._extra_per_position
        return self.pool.take(count)

    def record_admission(self, req: SimRequest, hit_tokens: int) -> None:
        """Count a new request's prefix-cache query and hit, in tokens (vLLM's counters)."""
        self.query_tokens += req.num_tokens
        self.hit_tokens += hit_tokens

    def cache_full_blocks(self, req: SimRequest) -> None:
        """Register the request's newly completed full blocks of prompt in the prefix cache.

        Blocks holding generated tokens wait for ``register_generated``: no other request's
        prompt can match them (generated ids are unique to their request), so only the
        request's own recompute after a preemption can, and that is when they are registered.
        """
        full = req.num_computed // self.block_size
        if full <= req.num_cached_blocks:
            return
        if self.prefix_caching:
            self._register(req, req.num_cached_blocks, min(full, req.prompt_len // self.block_size))
        req.num_cached_blocks = full

    def register_generated(self, req: SimRequest) -> None:
        """Register the full blocks of a request about to be preempted, generated ones too."""
        if self.prefix_caching:
            self._register(
                req, req.prompt_len // self.block_size, req.num_computed // self.block_size
            )

    def _register(self, req: SimRequest, start: int, end: int) -> None:
        if end > start:
            hashes = block_hashes(req, end, self.block_size)
            self.pool.register(hashes[start:end], req.blocks[start:end])
            if self.host is not None:
                self.host.store(hashes[start:end])

    def free(self, req: SimRequest) -> None:
        """Release the request's blocks, tail first; cached ones stay findable until reused."""
        self.pool.release_all(req.blocks[::-1])
        self._extra_used -= (
            len(req.blocks) * self._extra_per_position - req.skipped_blocks * self._extra_per_skip
        )
        req.blocks = []
        req.num_cached_blocks = 0
        req.skipped_blocks = 0
