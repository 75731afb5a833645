"""The measuring steps as records (``kneepoint.records.actions``): a shared study's task is one,
serialized into the study and read back as the very step the executor takes."""

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
    TaskStep,
    Validate,
)
from kneepoint.records.ledger import Finished
from kneepoint.records.task import Task

STEPS = {
    "knee": SearchKnee(),
    "repeats-r2": MeasureRepeats(repeats=(2, 1)),
    "baseline": JoinBaseline(),
    "trial-3-screen": Screen(trial=3),
    "trial-3-quality": CheckQuality(trial=3),
    "trial-3-validate-r1": Validate(trial=3, repeats=(1, 2)),
    "trial-3-promote": Promote(trial=3),
    "burst": CheckBurst(stopped=Finished(reason="max_trials", detail="4 trials run")),
}
"""Every step a task can carry, by its key (the keys shared studies queued before the steps
were records: a study begun by an earlier version completes each key once all the same)."""


def test_every_kind_of_step_is_held_here() -> None:
    kinds = typing.get_args(typing.get_args(TaskStep)[0])
    assert {type(step) for step in STEPS.values()} == set(kinds)


@pytest.mark.parametrize("key", sorted(STEPS))
def test_a_task_round_trips_through_json_as_the_step_it_carries(key: str) -> None:
    task = Task(action=STEPS[key], generation=1, batch=4)
    again = Task.model_validate_json(task.model_dump_json())
    assert again == task and type(again.action) is type(STEPS[key])
    assert again.key == key and again.trial == (3 if key.startswith("trial-") else 0)


def test_a_step_names_a_trial_only_where_it_is_one() -> None:
    with pytest.raises(ValidationError):
        Screen(trial=0)
    with pytest.raises(ValidationError):
        CheckBurst(trial=2)
    with pytest.raises(ValidationError):
        Task.model_validate({"action": {"step": "screen", "trial": 1, "repeats": [0, 1]},
                             "generation": 0})  # fmt: skip
