"""What one measured point leaves behind besides its scored LoadPoint: the requests' own
records and the server's ``/metrics`` text, kept in the run folder beside the point."""

from __future__ import annotations

from dataclasses import dataclass

from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.measure import RequestRecord


@dataclass(frozen=True, slots=True)
class PointArtifacts:
    """What one measured point leaves behind besides its LoadPoint."""

    rate_rps: float
    repeat: int
    point: LoadPoint
    records: tuple[RequestRecord, ...]
    metrics_text: tuple[str, ...] = ()
    """``/metrics`` before and after the load (HTTP backends only)."""
    attempt: int = 0
    """Which retake of the point this was (0: the first measurement)."""
