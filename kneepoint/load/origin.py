"""Where a request's latency counts from: its scheduled send, or the capped client's slot.

Latency counts from the schedule (``RequestRecord``); a study that asks for the slot's origin
(``measurement.latency_from: slot``) is scored on records whose schedule has moved to the
moment the capped client's slot freed, so every reading of a point (percentiles, goodput,
the stable window, trust) takes the same origin. The client's own lateness past that moment
still counts: only the cap's queue is forgiven.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from kneepoint.records import RequestRecord

LatencyFrom = Literal["schedule", "slot"]


def counted(records: Sequence[RequestRecord], latency_from: LatencyFrom) -> list[RequestRecord]:
    """The records as the study's origin counts them (the same records for ``schedule``)."""
    if latency_from == "schedule":
        return list(records)
    return [
        r.model_copy(update={"scheduled_s": r.scheduled_s + r.slot_wait_s, "slot_wait_s": 0.0})
        if r.slot_wait_s > 0
        else r
        for r in records
    ]
