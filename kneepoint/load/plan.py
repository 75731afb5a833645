"""Turn a workload at an offered rate into planned requests, deterministically for a seed.

Prompts are token ids: a shared document (the same ids every time it is drawn, so prefix
caching can catch it) followed by ids unique to the request. Arrival gaps follow the workload's
process at one request per second, divided by the rate, so every rate sends the same requests;
a trace is replayed with its timestamps scaled to the same rate.
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from kneepoint.records.workload import (
    ConstantArrivals,
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LengthDist,
    LognormalLength,
    PoissonArrivals,
    PrefixGroup,
    TraceEntry,
    UniformLength,
    Workload,
)

# Ids below this are left alone: tokenizers put special tokens there.
_FIRST_ID = 1000
DEFAULT_VOCAB_SIZE = 32_000


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request to send: when (seconds after the start), its class, prompt and output size."""

    index: int
    at_s: float
    traffic_class: str
    prompt: tuple[int, ...]
    max_tokens: int
    prefix_id: str | None = None


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


class _Documents:
    """The token ids of each prefix group's documents, and how popular each is."""

    def __init__(self, groups: Sequence[PrefixGroup], seed: int, vocab_size: int) -> None:
        self._groups = {g.name: g for g in groups}
        self._seed, self._vocab = seed, vocab_size
        self._cache: dict[tuple[str, int], tuple[int, ...]] = {}
        self._cum_weights: dict[str, list[float]] = {}
        for g in groups:
            if g.popularity == "zipf":
                weights = [1.0 / (rank**g.zipf_exponent) for rank in range(1, g.documents + 1)]
            else:
                weights = [1.0] * g.documents
            self._cum_weights[g.name] = list(accumulate(weights))

    def draw(self, name: str, rng: random.Random) -> tuple[str, tuple[int, ...]]:
        group = self._groups[name]
        doc = rng.choices(range(group.documents), cum_weights=self._cum_weights[name])[0]
        return f"{name}/{doc}", self.tokens(f"{name}/{doc}", group.prefix_tokens)

    def unique(self, key: str, count: int) -> tuple[int, ...]:
        """Ids for one request's own part of the prompt."""
        return _ids(f"{self._seed}:req:{key}", count, self._vocab)

    def tokens(self, key: str, count: int) -> tuple[int, ...]:
        cached = self._cache.get((key, count))
        if cached is None:
            cached = _ids(f"{self._seed}:doc:{key}", count, self._vocab)
            self._cache[(key, count)] = cached
        return cached


def _unit_gap(workload: Workload, rng: random.Random) -> float:
    """One inter-arrival gap at a rate of one request per second."""
    arrival = workload.arrival
    if isinstance(arrival, ConstantArrivals):
        return 1.0
    if isinstance(arrival, GammaArrivals):
        shape = arrival.burstiness
        return rng.gammavariate(shape, 1.0 / shape)
    assert isinstance(arrival, PoissonArrivals)
    return rng.expovariate(1.0)


def rate_salt(rate_rps: float, attempt: int = 0) -> str:
    """The salt a sweep gives the point at ``rate_rps`` (its ``attempt``-th retake) on one
    live server, so that no prompt repeats an earlier point's (``plan_requests``); a replay
    of a recording salts the same."""
    return f"{rate_rps:.9g}/" + (f"retake{attempt}/" if attempt else "")


RETAKE_SEED_STRIDE = 10_007
"""Seeds of a point's retakes step this far, past any repeat number a sweep uses."""


def point_seed(workload_seed: int, repeat: int, attempt: int = 0) -> int:
    """The seed a sweep draws the point of ``repeat`` (its ``attempt``-th retake) from: each
    repeat and each retake sends requests of its own."""
    return workload_seed + repeat + RETAKE_SEED_STRIDE * attempt


def plan_requests(
    workload: Workload,
    rate_rps: float,
    *,
    num_requests: int,
    seed: int | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    trace: Sequence[TraceEntry] = (),
    salt: str = "",
) -> list[PlannedRequest]:
    """The first ``num_requests`` requests of the workload offered at ``rate_rps``.

    The first arrives at time 0. ``seed`` defaults to the workload's; the same arguments always
    give the same plan. A trace workload needs its entries in ``trace``. ``salt`` changes the
    ids of each request's own part of its prompt (not its length, class, arrival or shared
    document): points sent to one live server need different salts, or its prefix cache
    serves a later point's prompts from an earlier point's (real H100 recordings at b0c96fd:
    33-38% of prompt tokens were such hits, tests/fixtures/real).
    """
    if rate_rps <= 0 or num_requests < 0:
        raise ValueError("rate_rps must be > 0 and num_requests >= 0")
    seed = workload.seed if seed is None else seed
    if workload.arrival.kind == "trace":
        docs = _Documents(workload.prefix_groups, seed, vocab_size)
        return _replay(workload, rate_rps, num_requests, trace, docs, salt=salt)
    planned: list[PlannedRequest] = []
    at = 0.0
    for index, draw in enumerate(_draws(workload, seed, vocab_size, salt).first(num_requests)):
        planned.append(
            PlannedRequest(
                index, at, draw.traffic_class, draw.prompt, draw.max_tokens, draw.prefix_id
            )
        )
        at += draw.unit_gap / rate_rps
    return planned


@dataclass(frozen=True, slots=True)
class _Draw:
    """One request with its gap to the next at one request per second: all but the rate."""

    traffic_class: str
    prompt: tuple[int, ...]
    max_tokens: int
    prefix_id: str | None
    unit_gap: float


class _Draws:
    """A workload's requests in order, drawn once and extended as longer plans ask.

    Common random numbers: every rate gets the same requests and the same gaps, scaled, so a
    sweep's latency curve moves with the rate and not with the draw. Every point of a run asks
    for the same requests, and drawing their prompt ids cost as much as simulating them.
    """

    def __init__(self, workload: Workload, seed: int, vocab_size: int, salt: str) -> None:
        self._workload, self._salt = workload, salt
        self._docs = _Documents(workload.prefix_groups, seed, vocab_size)
        self._rng = random.Random(f"{seed}:plan")
        self._cum = list(accumulate(c.weight for c in workload.classes))
        self._drawn: list[_Draw] = []
        self._lock = threading.Lock()

    def first(self, count: int) -> list[_Draw]:
        with self._lock:
            while len(self._drawn) < count:
                self._drawn.append(self._next(len(self._drawn)))
            return self._drawn[:count]

    def _next(self, index: int) -> _Draw:
        rng, workload = self._rng, self._workload
        cls = rng.choices(workload.classes, cum_weights=self._cum)[0]
        prefix_id: str | None = None
        prefix: tuple[int, ...] = ()
        if cls.prefix_group is not None:
            prefix_id, prefix = self._docs.draw(cls.prefix_group, rng)
        own = sample_length(cls.input_tokens, rng)
        out = sample_length(cls.output_tokens, rng)
        prompt = prefix + self._docs.unique(f"{self._salt}{index}", own)
        return _Draw(cls.name, prompt, out, prefix_id, _unit_gap(workload, rng))


_DRAWS: OrderedDict[tuple[str, int, int, str], _Draws] = OrderedDict()
_DRAWS_KEPT = 4  # workloads whose draws stay in memory (a run uses one; tests a few)
_DRAWS_LOCK = threading.Lock()


def _draws(workload: Workload, seed: int, vocab_size: int, salt: str) -> _Draws:
    key = (workload.model_dump_json(), seed, vocab_size, salt)
    with _DRAWS_LOCK:
        found = _DRAWS.get(key)
        if found is None:
            found = _DRAWS[key] = _Draws(workload, seed, vocab_size, salt)
            while len(_DRAWS) > _DRAWS_KEPT:
                _DRAWS.popitem(last=False)
        _DRAWS.move_to_end(key)
        return found


def _replay(
    workload: Workload,
    rate_rps: float,
    num_requests: int,
    trace: Sequence[TraceEntry],
    docs: _Documents,
    *,
    salt: str,
) -> list[PlannedRequest]:
    if not trace:
        raise ValueError("a trace workload needs the trace's entries")
    entries = sorted(trace, key=lambda e: e.timestamp_s)
    n, start = len(entries), entries[0].timestamp_s
    span = entries[-1].timestamp_s - start
    # Scale time so the trace runs at the offered mean rate; a point that needs more
    # requests than the trace holds replays it again from the start one mean gap after its
    # end, instead of ending the load early (a short trace read as an idle server).
    gap = span / (n - 1) if n > 1 else 0.0
    scale, period = gap * rate_rps, span + gap
    default_class = workload.classes[0].name
    planned = []
    for index in range(num_requests):
        cycle, entry = index // n, entries[index % n]
        prefix = _shared_part(entry, docs, cycle)
        own = entry.input_tokens - len(prefix)
        own = own if entry.blocks else max(own, 1)
        prompt = prefix + docs.unique(f"trace:{salt}{index}", own)
        offset = entry.timestamp_s - start + cycle * period
        at = offset / scale if scale else index / rate_rps
        cls = entry.traffic_class or default_class
        planned.append(PlannedRequest(index, at, cls, prompt, entry.output_tokens, entry.prefix_id))
    return planned


def _shared_part(entry: TraceEntry, docs: _Documents, cycle: int) -> tuple[int, ...]:
    """The prompt's tokens shared with other requests: its named prefix (a document, the same
    in every replay of the trace), or its blocks, the same ids wherever the same block id
    appears within one replay (a later replay's conversations are other users': their blocks
    are their own), cut where the prompt ends inside one."""
    if entry.blocks:
        size, parts = entry.block_tokens, []
        for i, block in enumerate(entry.blocks):
            take = min(size, entry.input_tokens - i * size)
            if take <= 0:
                break
            parts.append(docs.tokens(f"trace-block/{cycle}/{block}", size)[:take])
        return tuple(t for part in parts for t in part)
    if entry.prefix_id is not None and entry.prefix_tokens > 0:
        return docs.tokens(f"trace/{entry.prefix_id}", entry.prefix_tokens)
    return ()
