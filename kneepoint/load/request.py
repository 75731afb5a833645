"""What the load generator sends, and the draws every plan makes: lengths, arrival gaps and
token ids (a shared document's the same every time it is drawn, a request's own part its own).
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Generic, TypeVar

import numpy as np

from kneepoint.records import (
    ConstantArrivals,
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LengthDist,
    LognormalLength,
    PoissonArrivals,
    PrefixGroup,
    UniformLength,
    Workload,
)

# Ids below this are left alone: tokenizers put special tokens there.
_FIRST_ID = 1000
DEFAULT_VOCAB_SIZE = 32_000


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request to send: when (seconds after the start), its class, prompt and output size.

    A session's later turn follows another request (``after``, its index): it is sent
    ``think_s`` after the client has seen that one's last token, and not at all if that one
    failed; its ``at_s`` is then only the earliest it could go."""

    index: int
    at_s: float
    traffic_class: str
    prompt: tuple[int, ...]
    max_tokens: int
    prefix_id: str | None = None
    after: int | None = None
    think_s: float = 0.0
    session: int | None = None
    turn: int = 0
    """Its number in its session (0 for the first; a point's first turn of a session already
    under way when the point began is a later one)."""
    last_s: float | None = None
    """A later turn that falls due after this (the point's span) is not sent: sessions keep
    arriving to the end, and none trails on after it."""


def sample_length(dist: LengthDist, rng: random.Random) -> int:
    """One draw from a length distribution."""
    if isinstance(dist, FixedLength):
        return dist.tokens
    if isinstance(dist, UniformLength):
        return rng.randint(dist.min_tokens, dist.max_tokens)
    if isinstance(dist, LognormalLength):
        value = round(dist.median_tokens * math.exp(rng.gauss(0.0, dist.sigma)))
        return min(max(value, dist.min_tokens), dist.max_tokens)
    assert isinstance(dist, EmpiricalLength)
    weights = dist.weights or [1.0] * len(dist.values_tokens)
    return rng.choices(dist.values_tokens, weights=weights)[0]


def _ids(seed: str, count: int, vocab_size: int) -> tuple[int, ...]:
    # One vectorised draw per prompt: a per-token Python draw cost more than simulating it.
    key = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "little")
    draws = np.random.default_rng(key).integers(_FIRST_ID, vocab_size, size=count)
    return tuple(draws.tolist())


class Documents:
    """The token ids of each prefix group's documents, and how popular each is.

    A document's ids come from ``corpus_seed`` (the workload's seed; ``seed`` when None), a
    request's own ids from ``seed`` (the point's): every repeat of a point asks its own
    questions of the same corpus, as a live server's users do, so a warm-up of the corpus
    (``kneepoint.load.warmup``) warms it for every repeat."""

    def __init__(
        self,
        groups: Sequence[PrefixGroup],
        seed: int,
        vocab_size: int,
        corpus_seed: int | None = None,
    ) -> None:
        self._groups = {g.name: g for g in groups}
        self._seed, self._vocab = seed, vocab_size
        self._corpus = seed if corpus_seed is None else corpus_seed
        self._cache: dict[tuple[str, int], tuple[int, ...]] = {}
        self._cum_weights: dict[str, list[float]] = {}
        self._turn: dict[str, int] = {}
        """Draws so far of each ``cycle`` group: the next document is this one mod its count."""
        for g in groups:
            if g.popularity == "zipf":
                weights = [1.0 / (rank**g.zipf_exponent) for rank in range(1, g.documents + 1)]
            else:
                weights = [1.0] * g.documents
            self._cum_weights[g.name] = list(accumulate(weights))

    def draw(self, name: str, rng: random.Random) -> tuple[str, tuple[int, ...]]:
        group = self._groups[name]
        if group.popularity == "cycle":
            doc = self._turn.get(name, 0) % group.documents
            self._turn[name] = doc + 1
        else:
            doc = rng.choices(range(group.documents), cum_weights=self._cum_weights[name])[0]
        return f"{name}/{doc}", self.tokens(f"{name}/{doc}", group.prefix_tokens)

    def least_popular_first(self, name: str) -> list[tuple[str, tuple[int, ...]]]:
        """The group's documents (id, tokens), the least popular first: a cache that keeps
        the most recently used keeps the most popular of those it cannot all hold."""
        group = self._groups[name]
        order = (
            range(group.documents - 1, -1, -1)
            if group.popularity == "zipf"
            else range(group.documents)
        )
        return [(f"{name}/{d}", self.tokens(f"{name}/{d}", group.prefix_tokens)) for d in order]

    def unique(self, key: str, count: int) -> tuple[int, ...]:
        """Ids for one request's own part of the prompt."""
        return _ids(f"{self._seed}:req:{key}", count, self._vocab)

    def tokens(self, key: str, count: int) -> tuple[int, ...]:
        cached = self._cache.get((key, count))
        if cached is None:
            cached = _ids(f"{self._corpus}:doc:{key}", count, self._vocab)
            self._cache[(key, count)] = cached
        return cached


def unit_gap(workload: Workload, rng: random.Random) -> float:
    """One inter-arrival gap at a rate of one request per second."""
    arrival = workload.arrival
    if isinstance(arrival, ConstantArrivals):
        return 1.0
    if isinstance(arrival, GammaArrivals):
        shape = arrival.burstiness
        return rng.gammavariate(shape, 1.0 / shape)
    assert isinstance(arrival, PoissonArrivals)
    return rng.expovariate(1.0)


T = TypeVar("T")


class Kept(Generic[T]):
    """What a plan draws for a workload, kept for the few workloads in use (a run uses one;
    tests a few): every point of a run asks for the same draws, and drawing their prompt ids
    cost as much as simulating them. Keyed by the workload, seed, vocabulary and salt."""

    def __init__(self, make: Callable[[Workload, int, int, str], T], size: int = 4) -> None:
        self._make, self._size = make, size
        self._kept: OrderedDict[tuple[str, int, int, str], T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, workload: Workload, seed: int, vocab_size: int, salt: str) -> T:
        key = (workload.model_dump_json(), seed, vocab_size, salt)
        with self._lock:
            found = self._kept.get(key)
            if found is None:
                found = self._kept[key] = self._make(workload, seed, vocab_size, salt)
                while len(self._kept) > self._size:
                    self._kept.popitem(last=False)
            self._kept.move_to_end(key)
            return found
