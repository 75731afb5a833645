"""A sweep's measured points and the SLO capacity read from them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint

SweepKind = Literal["knee", "screen", "validate"]


class SweepPoint(Record):
    rate_rps: float = Field(gt=0.0)
    repeat: int = Field(default=0, ge=0)
    arm: str = "incumbent"
    """Which configuration (validation interleaves ``incumbent`` and ``challenger``)."""
    attempt: int = Field(default=0, ge=0)
    """0, or which retake of a point that could not tell this is."""
    margin: float = Field(ge=0.0)
    """Worst observed/limit ratio over the SLO (<= 1 meets it)."""
    point: LoadPoint

    @property
    def passed(self) -> bool:
        """A counted point that met the SLO."""
        return self.point.valid and self.margin <= 1.0

    @property
    def failed(self) -> bool:
        """A counted point that missed it."""
        return self.point.valid and self.margin > 1.0


class SweepResult(Record):
    kind: SweepKind
    config: EngineConfig
    points: tuple[SweepPoint, ...]
    capacity_rps: float | None
    """SLO capacity, interpolated (mean over repeats); None when no rate met the SLO."""
    capacity_low_rps: float | None = None
    capacity_high_rps: float | None = None
    """95% interval over repeats (equal to the capacity for a single repeat)."""
    capacity_by_repeat: tuple[float, ...] = ()
    knee_rps: float | None = None
    """Highest rate that met the SLO."""
    invalid_points: int = Field(default=0, ge=0)
    """Points that could not tell (``LoadPoint.invalid_reason``): recorded, not counted."""
    floor_reason: str | None = None
    """Why the capacity is only a floor, with no counted failure above it (the host could
    not measure higher, the time cap, no rate tried failed); None where a counted failure
    bounds it, or no rate passed."""
    capped: bool = False
    """The time cap stopped the sweep before it finished its plan."""
    retried: tuple[str, ...] = ()
    """Why earlier attempts at this sweep ended (a crash, a hang), each re-run on a fresh
    server; empty when the first attempt finished."""
    elapsed_s: float = Field(default=0.0, ge=0.0)
