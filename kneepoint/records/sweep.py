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
    superseded: bool = False
    """The point contradicted the configuration's curve (a miss below a rate that met the
    SLO, or a pass above one that missed) and its retake did not: the host, not the server,
    is what it measured, so it is kept but not counted."""

    @property
    def counted(self) -> bool:
        """A point that could tell, and was not superseded by its retake."""
        return self.point.valid and not self.superseded

    @property
    def passed(self) -> bool:
        """A counted point that met the SLO."""
        return self.counted and self.margin <= 1.0

    @property
    def failed(self) -> bool:
        """A counted point that missed it."""
        return self.counted and self.margin > 1.0

    def why_not_counted(self) -> str | None:
        """Why the point is not counted, in a few words (None when it is)."""
        if self.superseded:
            return "contradicted the curve and its retake did not: not counted"
        return self.point.invalid_reason()


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
    interrupted: bool = False
    """Stopped early (a person's Ctrl-C, a signal, the server's failure): what it measured
    until then."""
    retried: tuple[str, ...] = ()
    """Why earlier attempts at this sweep ended (a crash, a hang), each re-run on a fresh
    server; empty when the first attempt finished."""
    elapsed_s: float = Field(default=0.0, ge=0.0)

    @property
    def could_not_tell(self) -> bool:
        """Every point it measured was voided: the host, not the server, decided each (none
        counted, at least one taken)."""
        return bool(self.points) and not any(p.counted for p in self.points)


def nothing_met(result: SweepResult) -> str:
    """Why no rate of ``result`` met the SLO: its lowest counted rate and what missed."""
    counted = [p for p in result.points if p.counted]
    if not counted:
        why = next((p.why_not_counted() for p in result.points), None)
        return (
            f"no rate met the SLO (no point could tell: {why})"
            if why
            else ("no rate met the SLO (nothing was measured)")
        )
    low = min(counted, key=lambda p: p.rate_rps)
    missed = "; ".join(low.point.violations) or "the SLO"
    waiting = low.point.signals.waiting_mean
    idle = waiting is not None and waiting < 1.0
    unloaded = " with nothing queued: no rate can meet this SLO on this server" if idle else ""
    return f"no rate met the SLO; at the lowest, {low.rate_rps:.2f} req/s{unloaded}: {missed}"
