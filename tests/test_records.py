"""Rules the records enforce themselves: workloads, SLOs, budgets, knobs, studies."""

from __future__ import annotations

from datetime import UTC, datetime, time

import pytest
from pydantic import ValidationError

from kneepoint.config import ConfigError, load_study
from kneepoint.records.budget import Budget
from kneepoint.records.knobs import Knob
from kneepoint.records.lengths import EmpiricalLength, FixedLength, LognormalLength, UniformLength
from kneepoint.records.slo import ClassSlo, Slo
from kneepoint.records.workload import TrafficClass, Workload

from .conftest import QUICKSTART

FIXED = FixedLength(tokens=16)


def _cls(name: str, **kwargs: object) -> TrafficClass:
    return TrafficClass(name=name, input_tokens=FIXED, output_tokens=FIXED, **kwargs)  # type: ignore[arg-type]


def test_length_distributions_check_their_bounds() -> None:
    with pytest.raises(ValidationError, match="max_tokens"):
        UniformLength(min_tokens=10, max_tokens=5)
    with pytest.raises(ValidationError, match="median_tokens"):
        LognormalLength(median_tokens=5000, sigma=0.5, max_tokens=4096)
    with pytest.raises(ValidationError, match="weights has 1 entries"):
        EmpiricalLength(values_tokens=(1, 2), weights=(1.0,))


def test_workload_class_names_are_unique_and_prefix_groups_exist() -> None:
    with pytest.raises(ValidationError, match="appears more than once"):
        Workload(name="w", classes=(_cls("a"), _cls("a")))
    with pytest.raises(ValidationError, match="no prefix group named 'docs'"):
        Workload(name="w", classes=(_cls("a", prefix_group="docs"),))


def test_longest_request_counts_prefix_input_and_output() -> None:
    workload = Workload.model_validate(
        {
            "name": "w",
            "prefix_groups": [{"name": "docs", "documents": 4, "prefix_tokens": 1000}],
            "classes": [
                {
                    "name": "a",
                    "prefix_group": "docs",
                    "input_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 200},
                    "output_tokens": {"kind": "empirical", "values_tokens": [5, 50]},
                },
                {"name": "b", "input_tokens": FIXED, "output_tokens": FIXED},
            ],
        }
    )
    assert workload.max_request_tokens() == 1250


def test_slo_needs_a_limit_and_lists_the_set_ones() -> None:
    with pytest.raises(ValidationError, match="at least one limit"):
        ClassSlo()
    slo = ClassSlo(ttft_p99_ms=500, itl_p95_ms=50)
    assert slo.limits_ms() == {("ttft", 99): 500.0, ("itl", 95): 50.0}
    assert slo.model_dump() == {"ttft_p99_ms": 500.0, "itl_p95_ms": 50.0}
    assert Slo(default=slo).for_class("anything") == slo


def test_study_slos_must_cover_the_workload_classes() -> None:
    with pytest.raises(ConfigError, match="no SLO for classes siso"):
        load_study(QUICKSTART, ["workload=mix", "slo={classes: {silo: {ttft_p99_ms: 1}}}"])


def test_deadline_as_time_of_day_is_the_next_such_moment() -> None:
    budget = Budget(deadline="07:00")
    assert budget.deadline == time(7, 0)
    evening = datetime(2026, 11, 22, 21, 30, tzinfo=UTC)
    assert budget.deadline_after(evening) == datetime(2026, 11, 23, 7, 0, tzinfo=UTC)
    early = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
    assert budget.deadline_after(early) == datetime(2026, 11, 22, 7, 0, tzinfo=UTC)


def test_deadline_as_datetime_round_trips() -> None:
    budget = Budget(deadline="2026-11-23T07:00:00+01:00")
    assert Budget.model_validate(budget.model_dump(mode="json")) == budget
    with pytest.raises(ValidationError, match="neither a time of day"):
        Budget(deadline="tomorrow")


def test_knob_version_specifier_is_checked() -> None:
    with pytest.raises(ValidationError, match="not a version specifier"):
        Knob(
            name="max_num_seqs",
            flag="--max-num-seqs",
            domain={"kind": "bool"},  # type: ignore[arg-type]
            acts_on=("cache",),
            vllm_versions="newer than 0.5",
            description="x",
        )


def test_tensor_parallel_must_divide_the_heads() -> None:
    with pytest.raises(ConfigError, match="does not divide"):
        load_study(QUICKSTART, ["engine.tensor_parallel_size=3", "gpus=4"])


INLINE_NO_SLO = (
    "workload={name: w, classes: [{name: a, input_tokens: {kind: fixed, tokens: 8}, "
    "output_tokens: {kind: fixed, tokens: 8}}]}"
)


def test_only_peak_throughput_goes_without_slos() -> None:
    with pytest.raises(ConfigError, match="objective slo_capacity needs SLOs"):
        load_study(QUICKSTART, [INLINE_NO_SLO])
    study = load_study(QUICKSTART, [INLINE_NO_SLO, "objective={kind: peak_throughput}"])
    assert study.slo is None
