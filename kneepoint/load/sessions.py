"""Plan a conversational workload: sessions arrive, each a chain of turns whose prompts grow.

A session draws its class, its system prompt (one document of the class's prefix group), its
number of turns and, per turn, the new message's and the answer's lengths and the think time
before it. Turn t's prompt is the system prompt, then every earlier message followed by its
answer, then message t: so each prompt starts with the one before it, and the answers in it
are the ones the plan drew (ids of their own), not what the server generated; a server that
cached turn t's prompt serves it again to turn t+1, and computes the answer and the new
message. Sessions arrive at the offered request rate over the mean turns per session, with
the same draws at every rate (common random numbers); think times are a person's and do not
scale with the rate. A point starts with sessions already under way, as a server in
service has them: their later turns come in from the first second, so the offered rate is
the rate sent over the whole point, not only once the first sessions' later turns arrive.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from itertools import accumulate

from kneepoint.load.request import Documents, Kept, PlannedRequest, sample_length, unit_gap
from kneepoint.records import (
    ExponentialThink,
    FixedThink,
    FixedTurns,
    ThinkDist,
    TurnsDist,
    UniformTurns,
    Workload,
)

LEAD_SESSIONS = 400
LEAD_QUANTILE = 0.99
"""A point's sessions start this far back in their turns' delays: the simulated
multiturn-chat quickstart (think times lognormal, median 20 s) delivered 80-87% of its
offered rate in its stable window when every session started with the point (its later
turns still ramping up), and 92-101% with sessions under way from the 99th percentile
back."""


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
    """The turns of the sessions under way within the span ``num_requests`` requests take at
    ``rate_rps``: those that arrive in it, and those that arrived over the lead before it
    (``_Sessions.lead_s``: the point starts in steady state, its later turns already coming
    in). A turn that falls due after that span is not sent (``last_s``), so the offered rate
    holds to the end instead of trailing off over a session's length."""
    session_rate = rate_rps / workload.mean_turns_per_arrival()
    horizon = num_requests / rate_rps
    planned: list[PlannedRequest] = []
    draws = _SESSIONS.get(workload, seed, vocab_size, salt)
    for number, at in _under_way(draws, session_rate):
        _plan(planned, draws.session(number), number, at, horizon)
    at, number = 0.0, 0
    while at < horizon or (not planned and num_requests):
        session = draws.session(number)
        _plan(planned, session, number, at, horizon)
        at += session.unit_gap / session_rate
        number += 1
    return planned


def _under_way(draws: _Sessions, session_rate: float) -> list[tuple[int, float]]:
    """The sessions that arrived over the lead before the point (numbered -1, -2, ... back
    from it, drawn apart from the point's own so that these stay the same at every rate), as
    (number, arrival), earliest first."""
    found: list[tuple[int, float]] = []
    at, number = 0.0, -1
    while True:
        at -= draws.session(number).unit_gap / session_rate
        if at < -draws.lead_s():
            return found[::-1]
        found.append((number, at))
        number -= 1


def _plan(
    planned: list[PlannedRequest], session: _Session, number: int, at: float, horizon: float
) -> None:
    """Add the session's turns due in [0, ``horizon``] (its first, if it arrives in it, even
    where the point is too short for it: a point sends something); the first of them follows
    nothing."""
    earliest, first = at, True
    for t, turn in enumerate(session.turns):
        earliest += turn.think_s
        if earliest > horizon and (at < 0.0 or not first):
            return  # it could not be due in time
        if earliest < 0.0:
            continue  # a turn before the point began
        planned.append(
            PlannedRequest(
                index=len(planned),
                at_s=earliest,
                traffic_class=session.traffic_class,
                prompt=turn.prompt,
                max_tokens=turn.max_tokens,
                prefix_id=session.prefix_id,
                after=None if first else len(planned) - 1,
                think_s=turn.think_s,
                session=number,
                turn=t,
                last_s=horizon,
            )
        )
        first = False


class _Sessions:
    """A workload's sessions in order, drawn once and extended as longer plans ask: the
    point's own (0, 1, ...) and, from a stream of their own, those under way before it (-1,
    -2, ...)."""

    def __init__(self, workload: Workload, seed: int, vocab_size: int, salt: str) -> None:
        self._workload, self._salt = workload, salt
        self._docs = Documents(workload.prefix_groups, seed, vocab_size, workload.seed)
        self._rng = random.Random(f"{seed}:sessions")
        self._before_rng = random.Random(f"{seed}:sessions-before")
        self._cum = list(accumulate(c.weight for c in workload.classes))
        self._drawn: list[_Session] = []
        self._before: list[_Session] = []
        self._lead_s: float | None = None
        self._lock = threading.Lock()

    def lead_s(self) -> float:
        """How long before a point its sessions begin: the ``LEAD_QUANTILE`` of a turn's delay
        after its session's first (the think times before it) over the first
        ``LEAD_SESSIONS`` sessions. A turn's answer time adds to that on a live server; this
        counts think times only, so a point still ramps up a little over its first seconds."""
        if self._lead_s is None:
            sessions = [self.session(n) for n in range(LEAD_SESSIONS)]
            offsets = sorted(_offsets(sessions))
            self._lead_s = offsets[int(LEAD_QUANTILE * (len(offsets) - 1))]
        return self._lead_s

    def session(self, number: int) -> _Session:
        with self._lock:
            drawn, rng, at = (
                (self._drawn, self._rng, number)
                if number >= 0
                else (self._before, self._before_rng, -1 - number)
            )
            while len(drawn) <= at:
                drawn.append(self._next(-1 - len(drawn) if number < 0 else len(drawn), rng))
            return drawn[at]

    def _next(self, number: int, rng: random.Random) -> _Session:
        workload = self._workload
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


def _offsets(sessions: list[_Session]) -> list[float]:
    """Every turn's delay after its session's first turn, in think time."""
    found: list[float] = []
    for session in sessions:
        found += accumulate(turn.think_s for turn in session.turns)
    return found


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
