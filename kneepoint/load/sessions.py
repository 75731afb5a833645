"""Plan a conversational workload: sessions arrive, each a chain of turns whose prompts grow.

A session draws its class, its system prompt (one document of the class's prefix group), its
number of turns and, per turn, the new message's and the answer's lengths and the think time
before it. Turn t's prompt is the system prompt, then every earlier message followed by its
answer, then message t: so each prompt starts with the one before it, and the answers in it
are the ones the plan drew (ids of their own), not what the server generated; a server that
cached turn t's prompt serves it again to turn t+1, and computes the answer and the new
message. Sessions arrive at the offered request rate over the mean turns per session, with
the same draws at every rate (common random numbers); think times are a person's and do not
scale with the rate.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from itertools import accumulate

from kneepoint.load.request import Documents, Kept, PlannedRequest, sample_length, unit_gap
from kneepoint.records.session import (
    ExponentialThink,
    FixedThink,
    FixedTurns,
    ThinkDist,
    TurnsDist,
    UniformTurns,
)
from kneepoint.records.workload import Workload


@dataclass(frozen=True, slots=True)
class _Turn:
    prompt: tuple[int, ...]
    max_tokens: int
    think_s: float


@dataclass(frozen=True, slots=True)
class _Session:
    """One session with its gap to the next arrival at one request per second."""

    traffic_class: str
    prefix_id: str | None
    turns: tuple[_Turn, ...]
    unit_gap: float


def plan_sessions(
    workload: Workload,
    rate_rps: float,
    *,
    num_requests: int,
    seed: int,
    vocab_size: int,
    salt: str,
) -> list[PlannedRequest]:
    """The turns of the sessions that arrive within the span ``num_requests`` requests take
    at ``rate_rps``; a turn that falls due after that span is not sent (``last_s``), so the
    offered rate holds to the end instead of trailing off over a session's length. (It
    ramps up over the first sessions' length: ``ramp_seconds``.)"""
    session_rate = rate_rps / workload.mean_turns_per_arrival()
    horizon = num_requests / rate_rps
    planned: list[PlannedRequest] = []
    at, number = 0.0, 0
    draws = _SESSIONS.get(workload, seed, vocab_size, salt)
    while at < horizon or (not planned and num_requests):
        session = draws.session(number)
        earliest = at
        for t, turn in enumerate(session.turns):
            earliest += turn.think_s
            if t and earliest > horizon:
                break  # it could not be due in time
            planned.append(
                PlannedRequest(
                    index=len(planned),
                    at_s=earliest,
                    traffic_class=session.traffic_class,
                    prompt=turn.prompt,
                    max_tokens=turn.max_tokens,
                    prefix_id=session.prefix_id,
                    after=len(planned) - 1 if t else None,
                    think_s=turn.think_s,
                    session=number,
                    last_s=horizon,
                )
            )
        at += session.unit_gap / session_rate
        number += 1
    return planned


class _Sessions:
    """A workload's sessions in order, drawn once and extended as longer plans ask."""

    def __init__(self, workload: Workload, seed: int, vocab_size: int, salt: str) -> None:
        self._workload, self._salt = workload, salt
        self._docs = Documents(workload.prefix_groups, seed, vocab_size)
        self._rng = random.Random(f"{seed}:sessions")
        self._cum = list(accumulate(c.weight for c in workload.classes))
        self._drawn: list[_Session] = []
        self._lock = threading.Lock()

    def session(self, number: int) -> _Session:
        with self._lock:
            while len(self._drawn) <= number:
                self._drawn.append(self._next(len(self._drawn)))
            return self._drawn[number]

    def _next(self, number: int) -> _Session:
        rng, workload = self._rng, self._workload
        cls = rng.choices(workload.classes, cum_weights=self._cum)[0]
        prefix_id: str | None = None
        history: tuple[int, ...] = ()
        if cls.prefix_group is not None:
            prefix_id, history = self._docs.draw(cls.prefix_group, rng)
        count = _turns(cls.session.turns, rng) if cls.session is not None else 1
        turns = []
        for t in range(count):
            think = _think(cls.session.think_time, rng) if cls.session is not None and t else 0.0
            own = sample_length(cls.input_tokens, rng)
            answer = sample_length(cls.output_tokens, rng)
            key = f"{self._salt}s{number}/t{t}"
            prompt = history + self._docs.unique(f"{key}/user", own)
            turns.append(_Turn(prompt, answer, think))
            history = prompt + self._docs.unique(f"{key}/answer", answer)
        return _Session(cls.name, prefix_id, tuple(turns), unit_gap(workload, rng))


def _turns(dist: TurnsDist, rng: random.Random) -> int:
    if isinstance(dist, FixedTurns):
        return dist.turns
    if isinstance(dist, UniformTurns):
        return rng.randint(dist.min_turns, dist.max_turns)
    # Inverse transform of a geometric on 1, 2, ...: one draw per session.
    q = 1.0 - 1.0 / dist.mean_turns
    drawn = 1 if q <= 0.0 else 1 + int(math.log(1.0 - rng.random()) / math.log(q))
    return min(drawn, dist.max_turns)


def _think(dist: ThinkDist, rng: random.Random) -> float:
    if isinstance(dist, FixedThink):
        return dist.seconds
    if isinstance(dist, ExponentialThink):
        return min(rng.expovariate(1.0 / dist.mean_s), dist.max_s)
    return min(dist.median_s * math.exp(rng.gauss(0.0, dist.sigma)), dist.max_s)


_SESSIONS = Kept(_Sessions)
