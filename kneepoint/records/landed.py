"""A step of a run on several GPU sets as it comes back from the pool that ran it."""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.ledger import Event


class Landed(Record):
    """A step back from its GPUs: the events it measured, or why none (its node died)."""

    key: str
    """The step's key (``kneepoint.records.actions``)."""
    node: str
    gpu_ids: tuple[str, ...] = ()
    events: tuple[Event, ...] = ()
    lost: str | None = None
    held_s: float = Field(default=0.0, ge=0.0)
    """GPU-seconds its GPUs were held (for a lost attempt: what it cost)."""
    ran_s: tuple[float, float] | None = None
    """When it ran on its node, (start, end) in seconds since the epoch (Ray's pool)."""
