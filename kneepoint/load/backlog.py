"""Whether a load point's server kept up: its backlog over the stable window.

The backlog is the client's own count of requests in the system (due, by the origin latency
counts from, and not yet answered). Below the server's sustained throughput it holds level
once the server has filled up; past it, it grows for as long as the load lasts. A latency
SLO alone cannot tell the two apart on a point of a few tens of seconds: a bigger batch
admits the excess, first tokens stay fast while each step grows longer, and the point ends
before any limit breaks. So a sequence cap reads as a gain that no sustained load sees: on
the simulated frontend-bound scenario (2 API servers, whose engine streams at most ~13.6k
output tokens a second at any cap) 512 sequences "met" the SLO at 40 req/s while the
backlog grew from 198 to 539 requests, 31% of the offered rate a second. Without this rule
256, 512 and 1,024 sequences read 35.75, 40.22 and 41.86 req/s (and 34.36 against 36.94 with
120 s of arrivals: a bigger batch holds a growing queue longer); with it, 35.75, 35.77 and
35.77 (``kneepoint sweep`` of configs/scenarios/frontend-bound.yaml).

The growth is the least-squares slope of the count sampled across the window, as a share of
the offered rate. It counts only where the rise it fits exceeds three sigmas of what a server
that keeps up shows by chance: the count's change is arrivals less departures, each about
Poisson at the offered rate, so its variance over a span T is 2 x rate x T. A short point on a
slow host, or a near-critical one, is not failed by its fluctuations (the compute-bound
scenario's 8 s repeat at 9.83 req/s, 94% of its capacity, went 13 -> 32 requests, inside
them); and only where the window's second half grows
as fast, beyond its own noise: a server still filling up when the window opens grows a
backlog that levels off, an overloaded one grows it to the end. The simulated gemma-3-12b
H100 replay at 16 req/s (the real server met its SLO there) grew 24.6% of its rate over the
window and -22% over its second half. The CPU recording nice10 at 38 req/s, whose TTFT rose
from 0.3 to 2.2 s along the point, grew 22.6% and 34.4%, 47 requests in 4.6 s against a noise
of 56: a window that short cannot tell (``tests/fixtures/real/cpu-tiny-llama``).
And a point judges nothing where its requests live longer than the time from its first
arrival to the middle of its window (their p90, send to end): the server cannot have filled up
by then, and the fill reads as growth to the end. The gemma replay with fp8 weights at 20
req/s, met by the real server, grew 60% and 58% with a p90 lifetime of 8.6 s against 7.5 s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kneepoint.records import Backlog, RequestRecord

SAMPLES = 21
"""Times the count is read across the window (both ends included)."""
NOISE_SIGMAS = 3.0


def backlog(
    records: Sequence[RequestRecord],
    window_s: tuple[float, float],
    rate_rps: float,
    max_growth: float | None,
) -> Backlog | None:
    """The backlog over ``window_s`` (scheduled times, on the records' clock); its margin
    (``rate_margin``, from the lesser of the whole window's and the second half's growth)
    where the server has filled up and both rises are beyond their noise (0 otherwise, or
    with the rule off); None for an empty or zero-length window."""
    start, end = window_s
    if end <= start or rate_rps <= 0 or not records:
        return None
    due = np.asarray([r.scheduled_s for r in records], dtype=np.float64)
    done = np.asarray([math.inf if r.end_s is None else r.end_s for r in records])
    times = np.linspace(start, end, SAMPLES)
    counts = np.asarray([np.count_nonzero((due <= t) & (done > t)) for t in times])
    whole, noise = _growth(times, counts, rate_rps)
    half, half_noise = _growth(times[SAMPLES // 2 :], counts[SAMPLES // 2 :], rate_rps)
    inside = (due >= start) & (due <= end)
    lifetime = _p90(done[inside] - due[inside])
    settled = float(times[SAMPLES // 2] - due.min()) >= lifetime
    margin = 0.0
    if max_growth is not None and settled and whole[1] > noise and half[1] > half_noise:
        margin = rate_margin(min(whole[0], half[0]) / rate_rps, max_growth)
    return Backlog(
        start_requests=int(counts[0]),
        end_requests=int(counts[-1]),
        growth_share=whole[0] / rate_rps,
        second_half_growth_share=half[0] / rate_rps,
        noise_requests=noise,
        settled=settled,
        margin=margin,
    )


def rate_margin(growth_share: float, max_growth: float) -> float:
    """The backlog's margin on the rate scale: the offered rate over the rate the server
    answers (``1 - growth_share`` of it), against the same ratio at the allowed growth. It
    is 1 at ``max_growth``, as a latency's observed/limit is at its limit, so the knee's
    interpolation between a passing and a failing rate (``load.capacity``) reads both on
    one scale. Growth over ``max_growth`` (0.18 / 0.05 = 3.6) rose from 0 to past 3 within
    one 10% rung and put rag's 1,024-sequence validations at 46.5 req/s wherever the
    backlog failed 51.1 and at 51.3 where it did not: on the rate scale that
    rung's margin is 0.95 / 0.82 = 1.16."""
    if growth_share >= 1.0:
        return math.inf
    return max(0.0, (1.0 - max_growth) / (1.0 - growth_share))


def _p90(lifetimes: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """The p90 lifetime, an unanswered request's infinite (no interpolation between them)."""
    if not lifetimes.size:
        return math.inf
    return float(np.sort(lifetimes)[int(0.9 * (lifetimes.size - 1))])


def _growth(
    times: np.ndarray[Any, np.dtype[np.float64]],
    counts: np.ndarray[Any, np.dtype[np.int64]],
    rate_rps: float,
) -> tuple[tuple[float, float], float]:
    """((slope per second, rise over the span), the rise a steady count shows by chance)."""
    span = float(times[-1] - times[0])
    slope = float(np.polyfit(times, counts, 1)[0])
    return (slope, slope * span), NOISE_SIGMAS * math.sqrt(2.0 * rate_rps * span)


def violation(found: Backlog) -> str:
    """The miss in one line, as the SLO's own violations read."""
    return (
        f"backlog {found.start_requests} -> {found.end_requests} requests over the window "
        f"(+{found.growth_share:.0%} of the offered rate a second): the server does not keep up"
    )
