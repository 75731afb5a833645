"""Latency counted from the capped client's slot (``measurement.latency_from: slot``), the
way ``vllm bench serve --max-concurrency`` counts it, as a labelled study option beside the
schedule's origin (issue "Step 16", part 6)."""

from __future__ import annotations

import pytest

from kneepoint.cli.console import point_words
from kneepoint.config.errors import ConfigError
from kneepoint.config.study import load_study
from kneepoint.load.origin import counted
from kneepoint.load.point import load_point
from kneepoint.load.trust import Trust
from kneepoint.records.measure import RequestRecord
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.slo import ClassSlo, Slo
from kneepoint.sim.loadpoint import simulate_load_point
from tests.conftest import REPO

SLO = Slo(default=ClassSlo(ttft_p99_ms=500))
MIX = REPO / "configs" / "scenarios" / "qwen14b-ada-mix.yaml"


def _capped(i: int) -> RequestRecord:
    """Due every 0.1 s; the cap holds each for 2 s; the client itself is 5 ms late; served
    in 200 ms once sent."""
    due, wait = i * 0.1, 2.0 if i >= 10 else 0.0
    sent = due + wait + 0.005
    return RequestRecord(index=i, traffic_class="c", scheduled_s=due, sent_s=sent,
                         chunk_times_s=(sent + 0.2, sent + 0.3), end_s=sent + 0.3,
                         prompt_tokens=8, output_tokens=2, slot_wait_s=wait)  # fmt: skip


def test_the_slot_origin_forgives_the_caps_queue_but_not_the_clients_lag() -> None:
    records = [_capped(i) for i in range(20)]
    moved = counted(records, "slot")
    assert [r.ttft_ms for r in moved] == pytest.approx([205.0] * 20)
    assert [r.client_lag_s for r in moved] == pytest.approx([r.client_lag_s for r in records])
    assert counted(records, "schedule") == records


def test_a_point_counted_from_the_slot_carries_the_schedules_goodput() -> None:
    records = [_capped(i) for i in range(200)]
    scheduled = load_point(10.0, records, SLO)
    assert not scheduled.meets_slo and scheduled.goodput_from_schedule_rps is None
    slot = load_point(10.0, records, SLO, trust=Trust.of(SLO, MeasurementSpec(latency_from="slot")))
    assert slot.meets_slo and slot.latency_from == "slot"
    assert slot.goodput_rps == pytest.approx(10.0)
    assert slot.goodput_from_schedule_rps == pytest.approx(scheduled.goodput_rps)
    words = point_words(10.0, 0, slot)
    assert "10.00 req/s" in words and "from the client's slot; " in words
    assert f"{scheduled.goodput_rps:.2f} from the schedule" in words


def test_the_slot_origin_needs_a_capped_client() -> None:
    with pytest.raises(ConfigError, match=r"measurement\.latency_from: slot .*max_concurrency"):
        load_study(MIX, ["measurement.latency_from=slot"])


def test_a_capped_overloaded_mix_shows_what_caching_does_only_from_the_slot() -> None:
    """The Qwen-14B mix at 32 req/s behind a 128-request client: from the schedule every
    request queued behind the cap counts its queue, and caching's gain hides under it."""

    def goodput(origin: str, caching: str) -> tuple[float, float | None]:
        study = load_study(MIX, ["workload.client.max_concurrency=128",
                                 f"measurement.latency_from={origin}",
                                 f"engine.enable_prefix_caching={caching}"])  # fmt: skip
        point = simulate_load_point(study, 32.0, 400, seed=0).point
        return point.goodput_rps, point.goodput_from_schedule_rps

    off, on = goodput("slot", "false"), goodput("slot", "true")
    assert on[1] == pytest.approx(goodput("schedule", "true")[0])
    assert on[1] is not None and on[0] > 2 * on[1]  # 25.2 from the slot, 8.9 from the schedule
    assert off == (0.0, 0.0)  # uncached, it misses from either origin
