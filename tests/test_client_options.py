"""The workload's client options: a cap on requests in flight, a client timeout, and answers
that may end at EOS; what each backend does with them, and what it refuses."""

from __future__ import annotations

import pytest

from kneepoint.config import load_study
from kneepoint.load.plan import plan_requests
from kneepoint.probes.client.openai_wire import request_body
from kneepoint.sim.loadpoint import simulate_load_point

from .conftest import QUICKSTART, SMALL


def test_a_capped_client_runs_on_the_virtual_clock() -> None:
    """The cap holds requests back: never more than it in flight as the client sees them,
    a request that waited for a slot is sent when one frees, and its latency counts from
    its scheduled time (the wait is the server's slowness, not the client's lag)."""
    study = load_study(SMALL, ["workload.client.max_concurrency=2"])
    records = simulate_load_point(study, 6.0, 120).load.records
    spans = sorted((r.sent_s, r.end_s) for r in records if r.end_s is not None)
    for sent, _ in spans:
        assert sum(s <= sent < e for s, e in spans) <= 2
    waited = [r for r in records if r.slot_wait_s > 0]
    assert waited
    assert all(r.client_lag_s == pytest.approx(0.0, abs=1e-9) for r in records)
    open_loop = simulate_load_point(load_study(SMALL), 6.0, 120).load.records
    assert all(r.slot_wait_s == 0.0 for r in open_loop)


def test_answers_may_end_at_eos_on_real_models() -> None:
    study = load_study(QUICKSTART, ["workload.client.ignore_eos=false"])
    (planned,) = plan_requests(study.workload, 1.0, num_requests=1, seed=0)
    assert request_body(planned, "m", study.workload.client.ignore_eos)["ignore_eos"] is False
    assert request_body(planned, "m")["ignore_eos"] is True  # exact lengths by default


def test_a_workload_may_set_its_sampling_temperature() -> None:
    study = load_study(QUICKSTART, ["workload.client.temperature=0"])
    (planned,) = plan_requests(study.workload, 1.0, num_requests=1, seed=0)
    assert (
        request_body(planned, "m", temperature=study.workload.client.temperature)["temperature"]
        == 0.0
    )
    assert "temperature" not in request_body(planned, "m")  # the server's default


def test_the_client_timeout_fails_requests_on_the_virtual_clock_too() -> None:
    # Overloaded (a 2-sequence cap at 6 req/s): requests wait seconds for a slot.
    study = load_study(SMALL, ["workload.client.request_timeout_s=1.5"])
    point = simulate_load_point(study, 6.0, 120).point
    assert point.timed_out > 0 and point.goodput_rps < 6.0
    patient = simulate_load_point(load_study(SMALL), 6.0, 120).point
    assert patient.timed_out == 0


def test_a_capped_client_waits_as_long_as_its_own_timeout_on_the_virtual_clock() -> None:
    # One slot at 6 req/s: the queue for it grows past two minutes within 400 requests. The
    # client's timeout (600 s by default) is what cuts a request, not the point's own cut.
    study = load_study(SMALL, ["workload.client.max_concurrency=1"])
    point = simulate_load_point(study, 6.0, 400)
    waits = [r.end_s - r.scheduled_s for r in point.load.records if r.end_s is not None]
    assert max(waits) > 150.0
    assert point.point.timed_out == 0
    short = load_study(SMALL, ["workload.client.max_concurrency=1",
                               "workload.client.request_timeout_s=60"])  # fmt: skip
    assert simulate_load_point(short, 6.0, 400).point.timed_out > 0
