"""The contract every objective kind's rules keep (``kneepoint.load.objective``), one suite run
over every kind a study can name, as Optuna runs one suite over every sampler: a new kind
added to ``records.objective.Objective`` is held to it without a line added here."""

from __future__ import annotations

import statistics
import typing

import pytest

from kneepoint.load.objective import ObjectiveRules, rules
from kneepoint.records.engine import EngineConfig
from kneepoint.records.objective import Objective
from kneepoint.records.sweep import SweepPoint, SweepResult
from tests.support.readings import point

KINDS = typing.get_args(typing.get_args(Objective)[0])
VARIANTS = [
    kind(**extra)
    for kind in KINDS
    for extra in (
        {"rate_rps": 6.0} if "rate_rps" in kind.model_fields else {},
        *([{"per_gpu": True}] if "per_gpu" in kind.model_fields else []),
        *([{"tokens": "total"}] if "tokens" in kind.model_fields else []),
    )
]
TP2 = EngineConfig(model="meta-llama/Llama-3.1-8B-Instruct", tensor_parallel_size=2)


def _at(rate: float, repeat: int, *, counted: bool = True) -> SweepPoint:
    loaded = point({"steps_per_s": 10.0}, violations=(), lag_ms=50.0 if not counted else 0.5)
    loaded = loaded.model_copy(
        update={
            "rate_rps": rate,
            "goodput_rps": 0.9 * rate,
            "output_tokens_per_s": 80.0 * rate,
            "prompt_tokens_per_s": 20.0 * rate,
            "achieved_rps": rate,
            "client_bound": not counted,
        }
    )
    return SweepPoint(rate_rps=rate, repeat=repeat, arm="a", margin=0.5, point=loaded)


def _sweep(*points: SweepPoint, capacities: tuple[float, ...] = (5.5, 6.5)) -> SweepResult:
    return SweepResult(
        kind="validate",
        config=TP2,
        points=points,
        capacity_rps=statistics.fmean(capacities) if capacities else None,
        capacity_by_repeat=capacities,
        capacity_low_rps=min(capacities, default=None),
    )


def _ids(objective: Objective) -> str:
    return objective.model_dump_json()


@pytest.fixture(params=VARIANTS, ids=_ids)
def objective(request: pytest.FixtureRequest) -> Objective:
    return typing.cast(Objective, request.param)


def test_every_kind_has_rules_that_name_it_and_its_unit(objective: Objective) -> None:
    rule: ObjectiveRules = rules(objective)
    assert rule.name() and rule.unit()
    assert ("per GPU" in rule.unit()) == rule.per_gpu


def test_its_value_is_the_mean_of_its_repeats_divided_by_the_gpus_it_counts(
    objective: Objective,
) -> None:
    rule = rules(objective)
    result = _sweep(_at(6.0, 0), _at(12.0, 0), _at(6.0, 1), _at(24.0, 1))
    values = rule.by_repeat(result)
    assert values, "every kind reads a value off a sweep that measured its rates"
    assert rule.value(result) == pytest.approx(statistics.fmean(values))
    assert rule.width(TP2) == (2 if rule.per_gpu else 1)
    assert rule.width(EngineConfig(model="m")) == 1
    assert rule.noise_rel(result) >= 0.0
    assert rule.noise_rel(_sweep(_at(6.0, 0), capacities=(6.0,))) == 0.0


def test_nothing_measured_is_no_value(objective: Objective) -> None:
    rule = rules(objective)
    empty = _sweep(capacities=())
    assert rule.by_repeat(empty) == () and rule.value(empty) is None
    assert rule.noise_rel(empty) == 0.0


def test_a_point_that_cannot_tell_says_nothing_of_it(objective: Objective) -> None:
    rule = rules(objective)
    assert rule.point_value(_at(6.0, 0, counted=False)) is None


def test_its_rates_are_positive_ascending_and_cover_both_arms(objective: Objective) -> None:
    rule = rules(objective)
    rates = rule.repeat_rates(8.0)
    assert rates and all(r > 0 for r in rates) and rates == sorted(rates)
    arms = rule.validation_arms(8.0, 16.0)
    assert set(arms) == {"incumbent", "challenger"} and all(arms.values())
    if rule.fixed_rate_rps is not None:
        assert rates == [rule.fixed_rate_rps] and not rule.climbs and not rule.screens_knee
    if rule.is_capacity:
        # the knee itself: searched by a screen, found by climbing to a failure, each arm
        # validated around its own knee
        assert rule.screens_knee and rule.climbs
        assert min(arms["challenger"]) > min(arms["incumbent"])
    else:
        assert arms["incumbent"] == arms["challenger"]


def test_a_fleet_runs_a_replica_below_what_it_serves(objective: Objective) -> None:
    rule = rules(objective)
    result = _sweep(_at(6.0, 0), _at(6.0, 1))
    operating = rule.operating_rps(result, headroom=0.2)
    assert operating is not None and operating > 0
    if rule.fixed_rate_rps is None:
        assert operating <= (result.capacity_low_rps or 0.0)
    served = rule.served_rps(result)
    assert served is None or served > 0
