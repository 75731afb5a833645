"""The domain helpers the proposers share: coordinates land in the domain, choices compare
canonically, and configurations are built canonically or not at all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kneepoint.policies.search.space import (
    build_config,
    changes_from_incumbent,
    contains,
    first_step,
    from_coord,
    midpoint,
    to_coord,
)
from kneepoint.records.engine import EngineConfig
from kneepoint.records.knobs import BoolDomain, ChoiceDomain, FloatDomain, IntDomain

from .synthetic_space import SPEC, make_space

SEQS = IntDomain(low=8, high=1024, log=True)
MEMORY = FloatDomain(low=0.8, high=0.96, step=0.01)
INTERVAL = IntDomain(low=1, high=16)


@given(coord=st.floats(-50.0, 50.0))
def test_every_coordinate_maps_to_a_value_the_domain_holds(coord: float) -> None:
    for domain in (SEQS, MEMORY, INTERVAL):
        assert contains(domain, from_coord(domain, coord))


@given(value=st.integers(8, 1024))
def test_log_coordinates_round_trip_integers(value: int) -> None:
    assert from_coord(SEQS, to_coord(SEQS, value)) == value


def test_first_steps_double_or_take_a_quarter_of_the_range() -> None:
    assert from_coord(SEQS, to_coord(SEQS, 256) + first_step(SEQS)) == 512
    assert first_step(INTERVAL) == 3.75
    assert from_coord(MEMORY, 0.9 + first_step(MEMORY)) == 0.94
    assert midpoint(SEQS) == 91  # sqrt(8 x 1024) rounded


def test_membership_is_exact_about_types_and_grids() -> None:
    assert contains(MEMORY, 0.85) and not contains(MEMORY, 0.855) and not contains(MEMORY, 0.97)
    assert not contains(SEQS, True) and not contains(SEQS, 4.0) and not contains(SEQS, 2048)
    assert contains(BoolDomain(), False) and not contains(BoolDomain(), 0)
    spec = ChoiceDomain(choices=(None, SPEC))
    assert contains(spec, dict(reversed(list(SPEC.items())))) and contains(spec, None)
    assert not contains(ChoiceDomain(choices=(1, 2)), True)


def test_a_value_equal_to_the_incumbents_keeps_the_incumbents_own_setting() -> None:
    space = make_space()
    same = build_config(space.incumbent, {"max_num_seqs": 256}, space)
    assert same is not None and same.fingerprint() == space.incumbent.fingerprint()
    moved = build_config(space.incumbent, {"max_num_seqs": 512}, space)
    assert moved is not None and changes_from_incumbent(moved, space) == {"max_num_seqs": 512}


def test_a_change_set_engine_config_rejects_builds_nothing() -> None:
    space = make_space(EngineConfig(model="synthetic/model", max_num_batched_tokens=512))
    assert build_config(space.incumbent, {"max_num_seqs": 1024}, space) is None
    assert build_config(space.incumbent, {"gpu_memory_utilization": 1.5}, space) is None
