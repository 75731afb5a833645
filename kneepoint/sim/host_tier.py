"""KV offloading to host memory in the simulated engine, as vLLM's native connector does it
(``--kv-offloading-size``): every full block of prompt the device computes is stored to host
memory as well, least recently used blocks evicted there when it is full; a request whose
prefix the device pool no longer holds finds the rest of it here and loads it back over the
host link, one load at a time, waiting for it while others run (vLLM's requests waiting for
remote KVs), instead of computing its prefill again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


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
