"""Turn a workload at an offered rate into planned requests, deterministically for a seed.

Prompts are token ids: a shared document (the same ids every time it is drawn, so prefix
caching can catch it) followed by ids unique to the request. Arrival gaps follow the workload's
process at one request per second, divided by the rate, so every rate sends the same requests;
a trace is replayed with its timestamps scaled to the same rate.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from kneepoint.load.request import (
    DEFAULT_VOCAB_SIZE,
    Documents,
    Kept,
    PlannedRequest,
    sample_length,
    unit_gap,
)
from kneepoint.load.sessions import plan_sessions
from kneepoint.records import TraceEntry, Workload

__all__ = [
    "DEFAULT_VOCAB_SIZE",
    "RETAKE_SEED_STRIDE",
    "PlannedRequest",
    "plan_requests",
    "point_seed",
    "rate_salt",
    "sample_length",
]


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
    serves a later point's prompts from an earlier point's (a third of the prompt tokens of
    the unsalted H100 recordings in tests/fixtures/real were such hits).
    """
    if rate_rps <= 0 or num_requests < 0:
        raise ValueError("rate_rps must be > 0 and num_requests >= 0")
    seed = workload.seed if seed is None else seed
    if workload.conversational:
        return plan_sessions(
            workload,
            rate_rps,
            num_requests=num_requests,
            seed=seed,
            vocab_size=vocab_size,
            salt=salt,
        )
    if workload.arrival.kind == "trace":
        docs = Documents(workload.prefix_groups, seed, vocab_size, workload.seed)
        return _replay(workload, rate_rps, num_requests, trace, docs, salt=salt)
    planned: list[PlannedRequest] = []
    at = 0.0
    for index, draw in enumerate(_DRAWS.get(workload, seed, vocab_size, salt).first(num_requests)):
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
        self._docs = Documents(workload.prefix_groups, seed, vocab_size, workload.seed)
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
        return _Draw(cls.name, prompt, out, prefix_id, unit_gap(workload, rng))


_DRAWS = Kept(_Draws)


def _replay(
    workload: Workload,
    rate_rps: float,
    num_requests: int,
    trace: Sequence[TraceEntry],
    docs: Documents,
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


def _shared_part(entry: TraceEntry, docs: Documents, cycle: int) -> tuple[int, ...]:
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
