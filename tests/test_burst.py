"""The burst check: the plan (operating rate, burst, back), the TTFT margin window by window,
the recovery time, and the check the winner gets at the end of a tune."""

from __future__ import annotations

import pytest

from kneepoint.config import load_study
from kneepoint.load.burst import burst_plan, recovery_s, ttft_limits, window_s, windows
from kneepoint.records.ledger import BurstChecked, BurstWindow, Finished
from kneepoint.records.measure import RequestRecord
from kneepoint.run.ledger import Ledger

from .conftest import CONFIGS, TuneRun

QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"


def _request(i: int, at_s: float, ttft_s: float) -> RequestRecord:
    first = at_s + ttft_s
    return RequestRecord(index=i, traffic_class="chat", scheduled_s=at_s, sent_s=at_s,
                         chunk_times_s=(first, first + 0.02), end_s=first + 0.02)  # fmt: skip


def test_the_plan_steps_up_by_the_factor_for_the_burst_and_back() -> None:
    workload = load_study(QUICKSTART).workload
    plan = burst_plan(workload, 20.0, 2.5, settle_s=30.0, burst_s=10.0, after_s=40.0,
                      vocab_size=128_256, seed=7)  # fmt: skip
    assert (plan.burst_start_s, plan.burst_end_s) == (30.0, 40.0)
    times = [r.at_s for r in plan.requests]
    assert times == sorted(times) and [r.index for r in plan.requests] == list(range(len(times)))
    during = sum(30.0 <= t < 40.0 for t in times)
    before = sum(t < 30.0 for t in times)
    assert during == pytest.approx(500, abs=2) and before == pytest.approx(600, abs=2)
    assert len({r.prompt for r in plan.requests}) == len(times)  # no prompt repeats


def test_recovery_is_the_first_window_from_which_every_later_one_holds() -> None:
    # 20 req/s; TTFT 0.1 s, 3 s from 10 s after the burst's end (t=40) to 20 s after, then 0.1.
    def ttft(t: float) -> float:
        return 3.0 if 35.0 <= t < 60.0 else 0.1

    records = [_request(i, i / 20, ttft(i / 20)) for i in range(20 * 120)]
    limits = ttft_limits(load_study(QUICKSTART).slo, ["chat"])
    assert limits == {"chat": {99: 1000.0}}
    found = windows(records, limits, 20.0, burst_end_s=40.0)
    assert window_s(20.0) == 5.0 and found[1].start_s - found[0].start_s == 2.5
    assert all(w.requests >= 99 for w in found)
    late = recovery_s(found)
    # the last window touching t < 60 starts at 57.5 (17.5 s after the end); the next holds
    assert late == pytest.approx(20.0)
    assert recovery_s([*found[:-1], found[-1].model_copy(update={"ttft_margin": 1.5})]) is None


def test_a_recovery_past_the_limit_is_flagged() -> None:
    config = load_study(QUICKSTART).engine
    found = (BurstWindow(start_s=0.0, requests=100, ttft_margin=2.0),
             BurstWindow(start_s=70.0, requests=100, ttft_margin=0.5))  # fmt: skip
    checked = BurstChecked(config=config, operating_rps=30.0, burst_rps=75.0, burst_s=10.0,
                           recover_within_s=60.0, windows=found,
                           recovery_s=recovery_s(found))  # fmt: skip
    assert checked.recovery_s == 70.0 and not checked.recovered


def test_the_winner_is_burst_after_the_search_and_the_report_says_so(small_run: TuneRun) -> None:
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    assert isinstance(events[-2], Finished) and isinstance(events[-1], BurstChecked)
    checked = events[-1]
    assert not checked.skipped and checked.windows and checked.device_s > 0
    assert checked.burst_rps == pytest.approx(2.5 * checked.operating_rps)
    # the windows cover the stretch before, the burst, and the recovery limit after it
    assert checked.windows[0].start_s < -checked.burst_s
    assert checked.windows[-1].start_s >= checked.recover_within_s
    report = (small_run.folder / "report.md").read_text()
    section = report.split("## Burst recovery", 1)[1].split("\n## ", 1)[0]
    assert checked.summary() in section and "| window start" in section
