"""How much a study may spend: trials, device-hours and a wall-clock deadline.

The deadline is either a time of day ("07:00": the next such moment after the study starts,
in local time) or an absolute ISO-8601 datetime; one written without a UTC offset means local
time and is stored with the machine's offset, so it always compares with the clock.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Annotated, Any

from pydantic import Field, PlainSerializer, PlainValidator

from kneepoint.records.base import InputRecord


def _local(moment: datetime) -> datetime:
    """A naive moment read as local time (its offset from this machine's time zone)."""
    return moment.astimezone() if moment.tzinfo is None else moment


def _parse_deadline(value: Any) -> datetime | time | None:
    if value is None or isinstance(value, time):
        return value
    if isinstance(value, datetime):
        return _local(value)
    if not isinstance(value, str):
        raise ValueError("expected a time of day like '07:00' or an ISO datetime")
    text = value.strip()
    try:
        return time.fromisoformat(text)
    except ValueError:
        pass
    try:
        return _local(datetime.fromisoformat(text))
    except ValueError:
        pass
    raise ValueError(
        f"{value!r} is neither a time of day like '07:00' nor an ISO datetime "
        "like YYYY-MM-DDTHH:MM (local time unless it has an offset)"
    )


Deadline = Annotated[
    datetime | time | None,
    PlainValidator(_parse_deadline, json_schema_input_type=str | None),
    PlainSerializer(lambda v: v.isoformat() if v is not None else None, return_type=str | None),
]


class Budget(InputRecord):
    """Limits on a study; it stops at the first one reached. Unset limits do not apply."""

    max_trials: int | None = Field(default=40, ge=1)
    """Trials after the baseline (screening and validation of one config is one trial)."""
    max_device_hours: float | None = Field(default=None, gt=0.0)
    """GPU-hours: wall hours that servers run times the GPUs each uses."""
    deadline: Deadline = None
    """Stop starting new work after this moment ("07:00" or an ISO datetime)."""
    price_per_gpu_hour_usd: float | None = Field(default=None, ge=0.0)
    """Used to report the search's cost in dollars, and to price the fleet the report sizes
    (else the GPU catalogue's typical price)."""

    def deadline_after(self, start: datetime) -> datetime | None:
        """The deadline as an absolute moment, for a study that starts at ``start``: a time
        of day is the first such moment after it, in its own offset if it has one, else in
        local time with the offset in force on that date (a night across a DST change)."""
        if self.deadline is None or isinstance(self.deadline, datetime):
            return self.deadline
        when = self.deadline
        if when.tzinfo is not None:
            start = start.astimezone(when.tzinfo)
            moment = datetime.combine(start.date(), when)
            return moment if moment > start else moment + timedelta(days=1)
        start = start.astimezone()
        for day in (start.date(), start.date() + timedelta(days=1)):
            local = datetime.combine(day, when).astimezone()
            if local > start:
                return local
        raise AssertionError("a time of day recurs within a day")  # pragma: no cover
