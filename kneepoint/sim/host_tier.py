"""KV offloading to host memory in the simulated engine, as vLLM's native connector does it
(``--kv-offloading-size``): every full block of prompt the device computes is stored to host
memory as well, least recently used blocks evicted there when it is full; a request whose
prefix the device pool no longer holds finds the rest of it here and loads it back over the
host link, one load at a time, waiting for it while others run (vLLM's requests waiting for
remote KVs), instead of computing its prefill again.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kneepoint.sim.request import SimRequest

if TYPE_CHECKING:  # the cache holds a host tier: imported for its type only
    from kneepoint.sim.kv_cache import KvCache


class HostTier:
    """Block hashes held in host memory, ``capacity`` blocks at most, and the link's time."""

    def __init__(self, capacity: int, token_s: float) -> None:
        """``token_s``: seconds the host link takes to load one token's KV (all layers)."""
        self.capacity = capacity
        self.token_s = token_s
        self._held: OrderedDict[int, None] = OrderedDict()
        self._link_free_s = 0.0
        self.query_tokens = 0
        self.hit_tokens = 0
        """vLLM's external prefix-cache counters: tokens looked up past the device's hit, and
        those found here."""

    def store(self, hashes: Sequence[int]) -> None:
        held = self._held
        for block_hash in hashes:
            held[block_hash] = None
            held.move_to_end(block_hash)
        while len(held) > self.capacity:
            held.popitem(last=False)

    def matched(self, hashes: Sequence[int]) -> int:
        """How many of ``hashes`` lead in host memory (each one found is used again now)."""
        held, count = self._held, 0
        for block_hash in hashes:
            if block_hash not in held:
                break
            held.move_to_end(block_hash)
            count += 1
        return count

    def load(self, tokens: int, now_s: float) -> float:
        """When a load of ``tokens`` started now is in: after the loads before it."""
        start = max(now_s, self._link_free_s)
        self._link_free_s = start + tokens * self.token_s
        return self._link_free_s


class PrefixLoads:
    """The requests whose prefix is loading from host memory, out of the waiting queue."""

    def __init__(self, kv: KvCache) -> None:
        self.kv = kv
        self.loading: list[SimRequest] = []

    def begin(
        self, req: SimRequest, gpu_blocks: int, now_s: float, waiting: deque[SimRequest]
    ) -> bool:
        """Start loading the queue's head request's prefix where host memory holds more of
        it than the device (``gpu_blocks``); it then waits out of the queue. Whether it did."""
        host = self.kv.host
        if host is None or req.load_ready_s is not None:
            return False
        found = self.kv.host_prefix(req, gpu_blocks)
        if not found:
            return False
        block_size = self.kv.block_size
        host.query_tokens += req.num_tokens - gpu_blocks * block_size
        host.hit_tokens += found * block_size
        req.loaded_through = gpu_blocks + found
        req.load_ready_s = host.load(found * block_size, now_s)
        waiting.popleft()
        self.loading.append(req)
        return True

    def rejoin(self, now_s: float, waiting: deque[SimRequest]) -> None:
        """Requests whose prefix is in go back to the queue's head, in the order they came."""
        ready = [r for r in self.loading if (r.load_ready_s or 0.0) <= now_s]
        for req in sorted(ready, key=lambda r: r.rid, reverse=True):
            self.loading.remove(req)
            waiting.appendleft(req)

    def next_s(self) -> float | None:
        """When the next load comes in (None: none under way)."""
        return min((r.load_ready_s or 0.0 for r in self.loading), default=None)
