"""Deadlines: a time of day is the next such moment in local time with the offset in force on
that date (or in its own offset), a naive datetime is local time, and a new run whose deadline
cannot fit one baseline is refused (kneepoint.tune.deadline)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from kneepoint.config import load_study
from kneepoint.records.budget import Budget
from kneepoint.tune.deadline import baseline_floor_s, deadline_problem

from .conftest import QUICKSTART


@pytest.fixture
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_time_of_day_across_the_spring_change_keeps_its_local_hour(berlin: None) -> None:
    start = datetime(2026, 3, 28, 22, 0).astimezone()  # +01:00; clocks go forward at 02:00
    moment = Budget(deadline="07:00").deadline_after(start)
    assert moment is not None and moment.hour == 7 and moment.utcoffset() == timedelta(hours=2)


def test_a_time_of_day_with_an_offset_keeps_it(berlin: None) -> None:
    start = datetime(2026, 11, 22, 23, 0).astimezone()
    moment = Budget(deadline="07:00Z").deadline_after(start)
    assert moment == datetime.fromisoformat("2026-11-23T07:00:00+00:00")


def test_a_naive_datetime_is_local_time(berlin: None) -> None:
    deadline = Budget(deadline="2026-11-23T07:00").deadline
    assert isinstance(deadline, datetime) and deadline.utcoffset() == timedelta(hours=1)


def test_the_baseline_floor_and_the_refusals() -> None:
    study = load_study(QUICKSTART, ["backend={kind: sim, clock: http}"])
    floor = baseline_floor_s(study)  # two points of the knee search, 3 x 7 repeats
    assert 600 < floor < 1200
    now = datetime.now().astimezone()
    late = study.model_copy(update={"budget": Budget(deadline=now - timedelta(minutes=1))})
    assert "is already past" in (deadline_problem(late, now) or "")
    tight = study.model_copy(update={"budget": Budget(deadline=now + timedelta(minutes=5))})
    assert "less than one baseline needs" in (deadline_problem(tight, now) or "")
    roomy = study.model_copy(update={"budget": Budget(deadline=now + timedelta(hours=1))})
    assert deadline_problem(roomy, now) is None
