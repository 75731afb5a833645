"""How long a load point must run before it says anything about steady state.

A server under a constant offered rate fills up over about one request's lifetime (a request
admitted at the start finishes only then); a point that stops sending sooner measures the
ramp, not the load. So a point's arrivals must span a few lifetimes, and its stable window
must skip at least the first one. A lifetime is estimated before anything is measured: a
request's output tokens at the pace its SLO allows (three quarters of its ITL or TPOT limit,
where decode sits near the knee), or a typical decode step where the SLO sets no pace.
"""

from __future__ import annotations

from kneepoint.records import Slo, Workload, mean_length_tokens

TYPICAL_TOKEN_S = 0.03
PACE_SHARE_OF_LIMIT = 0.75
SETTLE_LIFETIMES = 3.0
"""Arrivals span at least this many request lifetimes."""
RAMP_SESSIONS = 2.0
"""Conversations: a point begins with sessions under way (``kneepoint.load.sessions``), and
the first turn it sends of each carries a history the server has not cached; after this many
mean session lengths most of those sessions are over (at 2.0 mean turns, 1 - 0.5^3 = 87%)."""


def request_seconds(workload: Workload, slo: Slo | None) -> float:
    """A typical request's lifetime near the knee, weighted over the traffic classes."""
    total = sum(c.weight for c in workload.classes)
    seconds = 0.0
    for cls in workload.classes:
        limits = slo.for_class(cls.name) if slo is not None else None
        paced = [
            v
            for (metric, _), v in (limits.limits_ms().items() if limits else ())
            if metric in ("itl", "tpot")
        ]
        token_s = PACE_SHARE_OF_LIMIT * min(paced) / 1000.0 if paced else TYPICAL_TOKEN_S
        seconds += cls.weight / total * mean_length_tokens(cls.output_tokens) * token_s
    return seconds


def settle_seconds(workload: Workload, slo: Slo | None) -> float:
    """The least span of arrivals a load point needs to reach and hold steady state."""
    return SETTLE_LIFETIMES * request_seconds(workload, slo) + (
        RAMP_SESSIONS * session_seconds(workload, slo)
    )


def session_seconds(workload: Workload, slo: Slo | None) -> float:
    """A session's mean length past its first turn: its think times and its later turns'
    lifetimes (0 where no class is conversational). A simulated agentic point at 80 req/s
    whose ramp counted the think times alone delivered 25 req/s in its window."""
    later = workload.mean_turns_per_arrival() - 1.0
    return workload.session_think_s() + later * request_seconds(workload, slo)


def ramp_seconds(workload: Workload, slo: Slo | None) -> float:
    """What a point's stable window skips: a request's lifetime, and for conversations the
    time the sessions under way at the start take to end (their histories sent cold)."""
    return request_seconds(workload, slo) + RAMP_SESSIONS * session_seconds(workload, slo)
