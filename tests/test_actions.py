"""The measuring steps as records (``kneepoint.records.actions``): each names the work it is by
its key, by which a pool's driver submits a step and takes it back when it lands."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from kneepoint.records.actions import (
    CheckBurst,
    CheckQuality,
    JoinBaseline,
    MeasureRepeats,
    Promote,
    Screen,
    SearchKnee,
    Validate,
)
from kneepoint.tune.dispatch import GpuStep

STEPS = {
    "knee": SearchKnee(),
    "repeats-r2": MeasureRepeats(repeats=(2, 1)),
    "baseline": JoinBaseline(),
    "trial-3-screen": Screen(trial=3),
    "trial-3-quality": CheckQuality(trial=3),
    "trial-3-validate-r1": Validate(trial=3, repeats=(1, 2)),
    "trial-3-promote": Promote(trial=3),
    "burst": CheckBurst(),
}
"""Every step a run takes, by its key."""


def test_every_kind_of_step_is_held_here() -> None:
    kinds = {*typing.get_args(GpuStep), JoinBaseline, Promote}
    assert {type(step) for step in STEPS.values()} == kinds


@pytest.mark.parametrize("key", sorted(STEPS))
def test_a_step_is_named_by_its_key(key: str) -> None:
    step = STEPS[key]
    assert step.key == key and step.trial == (3 if key.startswith("trial-") else 0)


def test_a_step_names_a_trial_only_where_it_is_one() -> None:
    with pytest.raises(ValidationError):
        Screen(trial=0)
    with pytest.raises(ValidationError):
        CheckBurst(trial=2)
    with pytest.raises(ValidationError):
        Screen.model_validate({"step": "screen", "trial": 1, "repeats": [0, 1]})
