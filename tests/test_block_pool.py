"""The block pool's free queue against the plainest model of it: an ordered dict of free
blocks, least recently freed first, from which a prefix hit takes a block out of the middle.

The pool keeps its queue as a deque whose entries go stale instead (kneepoint.sim.block_pool);
whatever mix of takes, holds and releases, it must hand out the same blocks in the same order,
keep the same counts and evict the same cached hashes.
"""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from kneepoint.sim.block_pool import BlockPool


class _Reference:
    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}
        self.owner: dict[int, int] = {}

    def take(self, count: int) -> list[int]:
        taken = []
        for _ in range(count):
            block, _ = self.free.popitem(last=False)
            old = self.owner.pop(block, None)
            if old is not None and self.cached.get(old) == block:
                del self.cached[old]
            self.ref[block] = 1
            taken.append(block)
        return taken

    def hold(self, block: int) -> None:
        if self.ref[block] == 0:
            del self.free[block]
        self.ref[block] += 1

    def release(self, block: int) -> None:
        self.ref[block] -= 1
        if self.ref[block] == 0:
            self.free[block] = None

    def register(self, hashes: list[int], blocks: list[int]) -> None:
        for block_hash, block in zip(hashes, blocks, strict=True):
            if block_hash not in self.cached:
                self.cached[block_hash] = block
                self.owner[block] = block_hash


@pytest.mark.parametrize("seed", range(20))
def test_the_pool_hands_out_blocks_as_an_ordered_free_list_would(seed: int) -> None:
    rng, size = random.Random(seed), 24
    pool, model = BlockPool(size), _Reference(size)
    held: list[int] = []  # one entry per hold, so a block held twice is released twice
    next_hash = 0
    for _ in range(400):
        move = rng.random()
        free = len(model.free)
        if move < 0.35 and free:
            count = rng.randint(1, free)
            taken = pool.take(count)
            assert taken == model.take(count)
            held += taken
            if rng.random() < 0.5:  # cache some of them, as a finished prefill does
                hashes = list(range(next_hash, next_hash + len(taken)))
                next_hash += len(taken) - rng.randint(0, len(taken))  # some hashes repeat
                pool.register(hashes, taken)
                model.register(hashes, taken)
        elif move < 0.55 and model.cached:  # a prefix hit: hold a cached block, free or not
            block = rng.choice(sorted(model.cached.values()))
            pool.hold(block)
            model.hold(block)
            held.append(block)
        elif held:
            releases = [held.pop(rng.randrange(len(held))) for _ in range(rng.randint(1, 3))
                        if held]  # fmt: skip
            pool.release_all(releases)
            for block in releases:
                model.release(block)
        assert pool.free_count == len(model.free)
        assert pool.ref == model.ref
        assert pool.cached == model.cached
