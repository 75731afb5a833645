"""The simulated server's ITL histogram counts one gap a step between a request's consecutive
tokens (``kneepoint.sim.signals.server_latency``): computed in one array pass, it must hold the
very gaps the definition gives, never one across two requests or between tokens of one step."""

from __future__ import annotations

import itertools
import random

from kneepoint.load import summarize
from kneepoint.sim.request import SimRequest
from kneepoint.sim.signals import server_latency


def _request(rid: int, times: list[float]) -> SimRequest:
    req = SimRequest(rid, (1, 2, 3), max(1, len(times)), arrival_s=0.0)
    req.token_times_s = times
    return req


def _by_definition(requests: list[SimRequest]) -> list[float]:
    return [
        (b - a) * 1000.0 for r in requests for a, b in itertools.pairwise(r.token_times_s) if b > a
    ]


def test_gaps_are_within_each_request_and_one_a_step() -> None:
    rng = random.Random(7)
    requests = []
    for rid in range(60):
        at, times = rng.uniform(0.0, 5.0), []
        for _ in range(rng.randint(1, 40)):
            at += rng.choice((0.0, 0.0, rng.uniform(0.005, 0.05)))  # a draft: several a step
            times.append(at)
        requests.append(_request(rid, times))
    expected = summarize(_by_definition(requests))
    assert server_latency(requests)["itl"] == expected


def test_no_gap_without_a_second_token_of_a_later_step() -> None:
    one_each = [_request(0, [1.0]), _request(1, [0.5]), _request(2, [2.0, 2.0])]
    latency = server_latency(one_each)
    assert "itl" not in latency and latency["ttft"].count == 3
