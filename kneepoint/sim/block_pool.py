"""The KV cache's physical blocks: reference counts, the free queue and the cached-hash map.

Freed blocks go to the tail of the free queue but keep their hash: a later request with the
same prefix can take them back (``hold``) until they are reused. Taking from the head (least
recently freed first) evicts the hash of what it takes, as vLLM V1's block pool does.

The queue is a deque: its ops are C calls, where an OrderedDict's cost twice as much per
block, and the simulator takes and frees every block of every request. A block taken back
out of the middle leaves its entry behind, counted as stale, and skipped when it comes up.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class BlockPool:
    """``num_blocks`` blocks, all free at first."""

    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        """Holders of each block (0: free)."""
        self.cached: dict[int, int] = {}
        """Block hash -> the block cached under it."""
        self.free_count = num_blocks
        """Free blocks (live entries in the queue)."""
        self._owner: list[int | None] = [None] * num_blocks
        """Block -> the hash it is cached under (None: none)."""
        self._queue: deque[int] = deque(range(num_blocks))
        self._stale = [0] * num_blocks
        """Per block, its entries in the queue that no longer stand for it: all of a held
        block's, and all but the newest of a free one's, so its oldest is stale while any is."""
        self._stale_entries = 0

    def hold(self, block: int) -> None:
        """One more holder of a block, taking a free one out of the queue (a prefix hit)."""
        if self.ref[block] == 0:
            self._stale[block] += 1
            self._stale_entries += 1
            self.free_count -= 1
        self.ref[block] += 1

    def release(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self._queue.append(block)
            self.free_count += 1

    def release_all(self, blocks: Sequence[int]) -> None:
        """Release each block in turn (-1, an empty position, is skipped)."""
        ref, queue = self.ref, self._queue.append  # ``release`` inlined: it runs for every
        freed = 0  # block of every request
        for block in blocks:
            if block >= 0:
                ref[block] -= 1
                if not ref[block]:
                    queue(block)
                    freed += 1
        self.free_count += freed

    def take(self, count: int) -> list[int]:
        """The ``count`` least recently freed blocks, now held once each (the caller has
        checked there are enough), with whatever they cached evicted."""
        pop, stale = self._queue.popleft, self._stale
        if self._stale_entries:
            taken: list[int] = []
            while len(taken) < count:
                block = pop()
                if stale[block]:
                    stale[block] -= 1
                    self._stale_entries -= 1
                else:
                    taken.append(block)
        else:  # no entry has gone stale: the next ``count`` are the blocks
            taken = [pop() for _ in range(count)]
        owner, cached, ref = self._owner, self.cached, self.ref
        for block in taken:
            old = owner[block]
            if old is not None:
                if cached.get(old) == block:
                    del cached[old]
                owner[block] = None
            ref[block] = 1
        self.free_count -= count
        return taken

    def register(self, hashes: Sequence[int], blocks: Sequence[int]) -> None:
        """Cache each block under its hash, unless the hash is cached already (the first
        block keeps it) or the position is empty (-1)."""
        cached, owner = self.cached, self._owner
        # (a plain loop: bulk dict updates measured slower, the dicts being large and growing)
        for block_hash, block in zip(hashes, blocks, strict=True):
            if block >= 0 and block_hash not in cached:
                cached[block_hash] = block
                owner[block] = block_hash
