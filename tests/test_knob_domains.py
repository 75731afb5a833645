"""Each kind of knob domain answers for itself: what it holds, a value's rank, its neighbours,
its next value along a walk, the values it names, and how a sampler holds it. One test per
question, across the four kinds."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from kneepoint.records.knob_domains import Categorical, canonical, same
from kneepoint.records.knobs import BoolDomain, ChoiceDomain, FloatDomain, IntDomain
from tests.support.synthetic_space import SPEC

SEQS = IntDomain(low=8, high=1024, log=True)
MEMORY = FloatDomain(low=0.8, high=0.96, step=0.01)
INTERVAL = IntDomain(low=1, high=16)
SWITCH = BoolDomain()
DTYPES = ChoiceDomain(choices=("auto", "fp8", "fp8_e5m2"))
SPECULATION = ChoiceDomain(choices=(None, SPEC))
SPEC_COPY = dict(reversed(list(SPEC.items())))


@given(coord=st.floats(-50.0, 50.0))
def test_every_coordinate_maps_to_a_value_the_domain_holds(coord: float) -> None:
    for domain in (SEQS, MEMORY, INTERVAL):
        assert domain.contains(domain.from_coord(coord))


@given(value=st.integers(8, 1024))
def test_log_coordinates_round_trip_integers(value: int) -> None:
    assert SEQS.from_coord(SEQS.to_coord(value)) == value


def test_first_steps_double_or_take_a_quarter_of_the_range() -> None:
    assert SEQS.from_coord(SEQS.to_coord(256) + SEQS.first_step()) == 512
    assert INTERVAL.first_step() == 3.75
    assert MEMORY.from_coord(0.9 + MEMORY.first_step()) == 0.94
    assert SEQS.midpoint() == 91  # sqrt(8 x 1024) rounded
    assert MEMORY.midpoint() == 0.88


def test_only_ranges_are_numeric() -> None:
    assert SEQS.numeric and MEMORY.numeric
    assert not SWITCH.numeric and not DTYPES.numeric


def test_membership_is_exact_about_types_and_grids() -> None:
    assert MEMORY.contains(0.85) and not MEMORY.contains(0.855) and not MEMORY.contains(0.97)
    assert not SEQS.contains(True) and not SEQS.contains(4.0) and not SEQS.contains(2048)
    assert SEQS.contains(8) and SEQS.contains(1024)
    assert SWITCH.contains(False) and not SWITCH.contains(0)
    assert SPECULATION.contains(SPEC_COPY) and SPECULATION.contains(None)
    assert not ChoiceDomain(choices=(1, 2)).contains(True)


def test_ranks_follow_each_kinds_order() -> None:
    assert SEQS.rank(256) == 256.0 and MEMORY.rank(0.9) == 0.9
    assert SEQS.rank(True) is None and MEMORY.rank("auto") is None
    assert SWITCH.rank(False) == 0.0 and SWITCH.rank(True) == 1.0 and SWITCH.rank(None) is None
    assert DTYPES.rank("auto") == 0.0 and DTYPES.rank("fp8_e5m2") == 2.0
    assert DTYPES.rank("int8") is None and SPECULATION.rank(SPEC_COPY) == 1.0


def test_neighbours_are_one_step_each_way_inside_the_domain() -> None:
    assert SEQS.neighbours(256) == [512, 128]
    assert SEQS.neighbours(1024) == [512]  # the step up is clipped to where it stands
    assert MEMORY.neighbours(0.9) == [0.94, 0.86]
    assert SEQS.neighbours(None) == [] and SEQS.neighbours(True) == []
    assert SWITCH.neighbours(True) == [False] and SWITCH.neighbours(None) == [True, False]
    assert DTYPES.neighbours("fp8") == ["auto", "fp8_e5m2"]
    assert SPECULATION.neighbours(SPEC_COPY) == [None]


def test_a_switch_or_choice_steps_along_its_order() -> None:
    assert SWITCH.next_value(False, up=True) == (True,)
    assert SWITCH.next_value(False, up=False) == (False,)  # where it already is
    assert DTYPES.next_value("auto", up=True) == ("fp8",)
    assert DTYPES.next_value("fp8", up=False) == ("auto",)
    assert DTYPES.next_value("fp8_e5m2", up=True) == ()
    assert DTYPES.next_value("int8", up=True) == ("auto",)
    assert DTYPES.next_value("int8", up=False) == ("fp8_e5m2",)


def test_named_values_are_a_ranges_ends_or_every_choice() -> None:
    assert SEQS.named_values == (8, 1024) and MEMORY.named_values == (0.8, 0.96)
    assert SWITCH.named_values == () and DTYPES.named_values == DTYPES.choices


def test_only_a_choice_has_choices() -> None:
    assert DTYPES.choices_or_empty == ("auto", "fp8", "fp8_e5m2")
    assert SEQS.choices_or_empty == MEMORY.choices_or_empty == SWITCH.choices_or_empty == ()


class _Described:
    """A sampler whose distributions are the arguments it was given."""

    def categorical(self, choices: tuple[Categorical, ...]) -> tuple[Any, ...]:
        return ("categorical", choices)

    def integers(self, low: int, high: int, *, log: bool) -> tuple[Any, ...]:
        return ("int", low, high, log)

    def floats(self, low: float, high: float, *, step: float | None) -> tuple[Any, ...]:
        return ("float", low, high, step)


def test_each_kind_says_its_distribution() -> None:
    assert SEQS.distribution(_Described()) == ("int", 8, 1024, True)
    assert MEMORY.distribution(_Described()) == ("float", 0.8, 0.96, 0.01)
    assert SWITCH.distribution(_Described()) == ("categorical", (False, True))
    assert SPECULATION.distribution(_Described()) == ("categorical", (None, canonical(SPEC)))


def test_parameters_round_trip_to_values() -> None:
    values: list[tuple[Any, JsonValue]] = [
        (SEQS, 256),
        (MEMORY, 0.85),
        (SWITCH, True),
        (DTYPES, "fp8"),
        (SPECULATION, SPEC_COPY),
        (SPECULATION, None),
    ]
    for domain, value in values:
        assert same(domain.from_param(domain.to_param(value)), value), (domain, value)
    assert SPECULATION.to_param(SPEC_COPY) == canonical(SPEC)
    assert MEMORY.from_param(0.8500000001) == 0.85 and SWITCH.from_param(1) is True
