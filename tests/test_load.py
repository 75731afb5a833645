"""Load planning, scoring and the capacity search: pure functions, checked exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kneepoint.cli.console import point_words
from kneepoint.config.errors import ConfigError
from kneepoint.config.trace import read_trace
from kneepoint.load.knee import Verdict, find_capacity
from kneepoint.load.plan import plan_requests
from kneepoint.load.point import load_point
from kneepoint.load.scoring import percentile, score, shown_over, stable_window
from kneepoint.records.measure import RequestRecord
from kneepoint.records.slo import ClassSlo, Slo
from kneepoint.records.workload import TraceEntry, Workload
from kneepoint.sim.virtual import chunk_times

WORKLOAD = Workload.model_validate(
    {
        "name": "w",
        "prefix_groups": [{"name": "docs", "documents": 3, "prefix_tokens": 64}],
        "classes": [
            {
                "name": "a",
                "weight": 3,
                "input_tokens": {"kind": "fixed", "tokens": 10},
                "output_tokens": {"kind": "uniform", "min_tokens": 5, "max_tokens": 9},
            },
            {
                "name": "b",
                "prefix_group": "docs",
                "input_tokens": {
                    "kind": "lognormal",
                    "median_tokens": 50,
                    "sigma": 0.5,
                    "max_tokens": 80,
                },
                "output_tokens": {"kind": "fixed", "tokens": 1},
            },
        ],
    }
)


def test_plan_is_deterministic_and_the_same_requests_at_every_rate() -> None:
    slow = plan_requests(WORKLOAD, 2.0, num_requests=300)
    assert slow == plan_requests(WORKLOAD, 2.0, num_requests=300)
    fast = plan_requests(WORKLOAD, 8.0, num_requests=300)
    assert [(r.prompt, r.max_tokens) for r in slow] == [(r.prompt, r.max_tokens) for r in fast]
    assert [r.at_s / 4 for r in slow] == pytest.approx([r.at_s for r in fast])
    assert plan_requests(WORKLOAD, 2.0, num_requests=300, seed=1) != slow


def test_a_salt_changes_each_requests_own_tokens_and_nothing_else() -> None:
    # A live server keeps its prefix cache between points: unsalted, a later point's prompts
    # were an earlier point's (real H100 recordings: 33-38% prompt-token cache hits).
    plain = plan_requests(WORKLOAD, 2.0, num_requests=300)
    salted = plan_requests(WORKLOAD, 2.0, num_requests=300, salt="8/")
    assert [(r.at_s, r.traffic_class, len(r.prompt), r.max_tokens, r.prefix_id) for r in plain] == [
        (r.at_s, r.traffic_class, len(r.prompt), r.max_tokens, r.prefix_id) for r in salted
    ]
    for a, b in zip(plain, salted, strict=True):
        shared = 64 if a.prefix_id is not None else 0  # the group's document, 64 tokens
        assert a.prompt[:shared] == b.prompt[:shared]  # still shared: the cache should hit it
        assert a.prompt[shared:] != b.prompt[shared:]
    assert salted == plan_requests(WORKLOAD, 2.0, num_requests=300, salt="8/")


def test_plan_lengths_classes_rate_and_shared_documents() -> None:
    plan = plan_requests(WORKLOAD, 5.0, num_requests=4000)
    a = [r for r in plan if r.traffic_class == "a"]
    b = [r for r in plan if r.traffic_class == "b"]
    assert len(a) / len(plan) == pytest.approx(0.75, abs=0.03)
    assert all(len(r.prompt) == 10 and 5 <= r.max_tokens <= 9 for r in a)
    assert all(64 + 1 <= len(r.prompt) <= 64 + 80 and r.max_tokens == 1 for r in b)
    by_doc: dict[str | None, set[tuple[int, ...]]] = {}
    for r in b:
        by_doc.setdefault(r.prefix_id, set()).add(r.prompt[:64])
    assert len(by_doc) == 3 and all(len(prefixes) == 1 for prefixes in by_doc.values())
    assert len({r.prompt[64:] for r in b}) == len(b)  # the rest is the request's own
    assert plan[-1].at_s / (len(plan) - 1) == pytest.approx(1 / 5.0, rel=0.05)


def test_trace_replay_scales_to_the_offered_rate(tmp_path: Path) -> None:
    lines = [
        {
            "timestamp_s": 10 + 2 * i,
            "input_tokens": 100,
            "output_tokens": 7,
            "prefix_id": "p",
            "prefix_tokens": 32,
        }
        for i in range(5)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    workload = Workload.model_validate(
        {**WORKLOAD.model_dump(), "arrival": {"kind": "trace", "path": path}}
    )
    plan = plan_requests(workload, 1.0, num_requests=12, trace=read_trace(path))
    # five entries two trace-seconds apart at 1 req/s: one a second, and a point that needs
    # more requests replays the trace again, one mean gap after its end
    assert [r.at_s for r in plan] == pytest.approx(list(range(12)))
    assert all(len(r.prompt) == 100 and r.max_tokens == 7 for r in plan)
    assert len({r.prompt[:32] for r in plan}) == 1
    assert len({r.prompt for r in plan}) == 12, "each request's own part is its own"


def test_trace_errors_name_the_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = json.dumps({"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5})
    path.write_text(
        good + "\n" + json.dumps({"timestamp_s": 1, "input_tokens": 0, "output_tokens": 5})
    )
    with pytest.raises(ConfigError) as info:
        read_trace(path)
    assert info.value.lines() == [
        f"{path}:2: input_tokens: input should be greater than or equal to 1"
    ]
    path.write_text(good + "\n{oops")
    with pytest.raises(ConfigError, match=r"t.jsonl:2: not JSON"):
        read_trace(path)
    path.write_text(
        json.dumps(
            {"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5, "traffic_class": "zzz"}
        )
    )
    with pytest.raises(ConfigError, match=r":1: traffic_class: no class 'zzz'"):
        read_trace(path, ["a", "b"])
    assert read_trace(path)[0] == TraceEntry(
        timestamp_s=0, input_tokens=5, output_tokens=5, traffic_class="zzz"
    )


@pytest.mark.parametrize("pct", [0, 1, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy(pct: float) -> None:
    values = [float(v) for v in np.random.default_rng(3).lognormal(size=101)]
    assert percentile(values, pct) == pytest.approx(float(np.percentile(values, pct)))


def _record(i: int, ttft: float, gaps: list[float], error: str | None = None) -> RequestRecord:
    times = [i + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(
        index=i,
        traffic_class="c",
        scheduled_s=float(i),
        sent_s=float(i) + 0.001,
        chunk_times_s=tuple(times) if error is None else (),
        end_s=times[-1] if error is None else None,
        prompt_tokens=10,
        output_tokens=len(times),
        error=error,
    )


def test_failures_count_against_percentiles_and_goodput() -> None:
    records = [_record(i, 0.1, [0.01] * 3) for i in range(100)]
    records[50:55] = [_record(i, 0, [], error="HTTP 500") for i in range(50, 55)]
    slo = Slo(default=ClassSlo(ttft_p90_ms=150, itl_p99_ms=20))
    result = score(records, slo, trim=0.0)
    assert result.failed == 5 and result.good == 95 and result.total == 100
    assert result.dists["c"]["ttft"].p90_ms == pytest.approx(100.0)
    assert math.isinf(result.dists["c"]["ttft"].p95_ms)  # 5 of 100 failed: p95 is among them
    assert result.meets_slo is False
    assert result.violations == ("c itl_p99 inf ms > 20 ms",)
    assert result.good_share == pytest.approx(0.95)


def test_latency_counts_from_the_scheduled_time_and_the_window_trims() -> None:
    rec = _record(3, 0.25, [0.02, 0.03])
    assert rec.ttft_ms == pytest.approx(250.0)
    assert rec.itls_ms() == pytest.approx([20.0, 30.0])
    assert rec.tpot_ms == pytest.approx(25.0)
    assert rec.send_lag_s == pytest.approx(0.001)
    window = stable_window([_record(i, 0.1, []) for i in range(11)], trim=0.1)
    assert [r.index for r in window] == list(range(1, 10))


def test_chunks_follow_stream_interval() -> None:
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert chunk_times(times, 1) == times
    assert chunk_times(times, 2) == [1.0, 3.0, 5.0, 6.0]
    assert chunk_times(times, 5) == [1.0, 6.0]
    assert chunk_times(times[:1], 4) == [1.0]


@pytest.mark.parametrize("start", [0.5, 7.0, 40.0])
def test_capacity_search_brackets_a_threshold(start: float) -> None:
    found = find_capacity(lambda rate: "pass" if rate <= 12.3 else "fail", start, rel_tol=0.01)
    assert found.passing_rps <= 12.3 < found.failing_rps  # type: ignore[operator]
    assert found.failing_rps - found.passing_rps <= 0.01 * found.passing_rps + 1e-9  # type: ignore[operator]


def test_capacity_search_edges() -> None:
    assert find_capacity(lambda r: "fail", 1.0).passing_rps == 0.0
    never = find_capacity(lambda r: "pass", 1.0, max_rps=100.0)
    assert never.passing_rps == 100.0 and never.failing_rps is None
    # the start cannot tell: a pass below it, then the climb over it to a counted failure
    tried: list[float] = []

    def check(rate: float) -> Verdict:
        tried.append(rate)
        return "unknown" if rate == 4.0 else "pass" if rate <= 5.0 else "fail"

    found = find_capacity(check, 4.0, rel_tol=0.5)
    assert tried == [4.0, 2.0, 8.0, 5.0, 6.5]
    assert (found.passing_rps, found.failing_rps) == (5.0, 6.5)


def test_vllms_goodput_rule_holds_the_mean_token_time_where_ours_holds_each_gap() -> None:
    """Short answers with one stall: within the SLO over the window, each fails its own p95
    gap (every limit) but not its mean time per output token (vllm bench serve --goodput's
    rule, offered as slo.goodput_rule: vllm; issue "Step 13")."""
    stalled = [_record(i, 0.1, [0.01] * 8 + [0.2]) for i in range(10)]
    smooth = [_record(i, 0.1, [0.01] * 9) for i in range(10, 100)]
    limits = {"ttft_p99_ms": 500, "itl_p95_ms": 50}
    ours = score(stalled + smooth, Slo(default=ClassSlo(**limits)), trim=0.0)
    vllms = score(stalled + smooth, Slo(default=ClassSlo(**limits), goodput_rule="vllm"), 0.0)
    assert ours.meets_slo and vllms.meets_slo  # the verdict reads the window, either way
    assert ours.good == 90 and vllms.good == 100  # mean TPOT of a stalled one: 31 ms
    point = load_point(10.0, stalled + smooth, Slo(default=ClassSlo(**limits),
                                                   goodput_rule="vllm"), trim=0.0)  # fmt: skip
    assert point.goodput_rule == "vllm"
    assert "per request, 100% by vLLM's rule" in point_words(10.0, 0, point)


def test_a_miss_is_shown_above_its_limit() -> None:
    # A p95 of 50.4 ms against 50 ms read "50 ms > 50 ms" (issue "Step 17").
    assert shown_over(50.4, 50.0) == "50.4"
    assert shown_over(1523.2, 1000.0) == "1523"
    assert shown_over(49.96, 49.9) == "50"
    assert shown_over(float("inf"), 20.0) == "inf"
