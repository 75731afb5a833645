"""`--set path=value` overrides: typed values, nested paths, list indices, clear errors."""

from __future__ import annotations

import pytest

from kneepoint.config import ConfigError, load_study
from kneepoint.config.overrides import apply_override, parse_override
from kneepoint.records.lengths import FixedLength

from .conftest import QUICKSTART


def test_values_are_read_as_yaml() -> None:
    assert parse_override("a.b=8").value == 8
    assert parse_override("a=0.9").value == 0.9
    assert parse_override("a=false").value is False
    assert parse_override("a=null").value is None
    assert parse_override("a=[x, y]").value == ["x", "y"]
    assert parse_override("a={kind: fixed, tokens: 4}").value == {"kind": "fixed", "tokens": 4}
    assert parse_override("a=x=y").value == "x=y"
    assert parse_override("w.classes.0.weight=2").loc == ("w", "classes", 0, "weight")
    assert parse_override("w.classes[0].weight=2").loc == ("w", "classes", 0, "weight")
    assert parse_override("m[1][2]=2").loc == ("m", 1, 2)


@pytest.mark.parametrize(
    "text", ["novalue", "=3", "a..b=1", "a.b c=1", "a=[unclosed", "a[x]=1", "a[0=1"]
)
def test_malformed_overrides_are_refused(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_override(text)
    assert info.value.problems[0].source == f"--set {text}"


def test_apply_creates_missing_mappings_and_indexes_lists() -> None:
    data: dict[str, object] = {"a": [{"w": 1}]}
    apply_override(data, parse_override("a.0.w=5"))
    apply_override(data, parse_override("b.c.d=x"))
    assert data == {"a": [{"w": 5}], "b": {"c": {"d": "x"}}}


def test_index_out_of_range_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="index 3 is out of range"):
        apply_override({"a": [1]}, parse_override("a.3=5"))


def test_overrides_reach_the_validated_study() -> None:
    study = load_study(
        QUICKSTART,
        [
            "engine.max_num_seqs=64",
            "engine.async_scheduling=true",
            "budget.deadline=07:00",
            "search.knobs=[max_num_seqs]",
        ],
    )
    assert study.engine.max_num_seqs == 64
    assert study.engine.async_scheduling is True
    assert study.budget.deadline is not None
    assert study.search.knobs == ("max_num_seqs",)


def test_overrides_reach_inside_a_workload_preset() -> None:
    study = load_study(QUICKSTART, ["workload.classes.0.output_tokens={kind: fixed, tokens: 64}"])
    assert study.workload.name == "chat"
    assert study.workload.classes[0].output_tokens == FixedLength(tokens=64)


def test_swapping_the_workload_preset_brings_its_slos() -> None:
    study = load_study(QUICKSTART, ["workload=mix"])
    assert study.workload.class_names() == ("siso", "silo", "liso", "lilo")
    assert study.slo is not None and set(study.slo.classes) == {"siso", "silo", "liso", "lilo"}


def test_problems_caused_by_an_override_name_the_override() -> None:
    with pytest.raises(ConfigError) as info:
        load_study(QUICKSTART, ["engine.gpu_memory_utilization=1.3"])
    assert [str(p) for p in info.value.problems] == [
        "--set engine.gpu_memory_utilization=1.3: engine.gpu_memory_utilization: "
        "must be less than or equal to 1 (got 1.3)"
    ]


def test_unknown_override_path_is_an_unknown_key() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'max_num_seqs'"):
        load_study(QUICKSTART, ["engine.max_num_seq=4"])


def test_one_limit_set_on_a_presets_slo_keeps_the_others() -> None:
    """`--set slo.default.itl_p95_ms=1` dropped the chat preset's TTFT limit (2026-12-03); a
    whole `slo=` still replaces it."""
    one = load_study(QUICKSTART, ["slo.default.itl_p95_ms=1"]).slo.default
    assert one is not None and (one.itl_p95_ms, one.ttft_p99_ms) == (1.0, 1000.0)
    whole = load_study(QUICKSTART, ["slo={default: {itl_p95_ms: 1}}"]).slo.default
    assert whole is not None and (whole.itl_p95_ms, whole.ttft_p99_ms) == (1.0, None)
