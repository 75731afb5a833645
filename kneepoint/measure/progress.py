"""What a run tells whoever watches it: the loop's phases and trials, and every point the
harness measures.

Both call a ``Progress``; the command line supplies one that draws a person's view on a
terminal (``kneepoint.cli.console``), and every call is also a structured log event, so
an unattended run's output stays machine-readable.
"""

from __future__ import annotations

from typing import Protocol

import structlog

from kneepoint.records import LoadPoint

log = structlog.get_logger(__name__)


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h14m``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


class Progress(Protocol):
    def phase(self, name: str, detail: str = "", expected_points: int | None = None) -> None:
        """A new stage of the run (baseline, screening trial 3, validation ...)."""
        ...

    def sweep(self, label: str, expected_points: int | None) -> None:
        """A sweep starts (its points will be reported under ``label``)."""
        ...

    def point(self, label: str, rate_rps: float, repeat: int, point: LoadPoint) -> None:
        """One load point measured."""
        ...

    def status(self, line: str) -> None:
        """The run's standing: incumbent, best capacity, budget left."""
        ...

    def outcome(self, line: str) -> None:
        """What a finished step gave (a trial's verdict, the baseline's capacity): the sweep
        before it is over."""
        ...


class LogProgress:
    """Progress as structured events only."""

    def phase(self, name: str, detail: str = "", expected_points: int | None = None) -> None:
        log.info("run.phase", phase=name, detail=detail, expected_points=expected_points)

    def sweep(self, label: str, expected_points: int | None) -> None:
        log.info("run.sweep", sweep=label, expected_points=expected_points)

    def point(self, label: str, rate_rps: float, repeat: int, point: LoadPoint) -> None:
        log.info(
            "run.point",
            sweep=label,
            rate_rps=round(rate_rps, 3),
            repeat=repeat,
            goodput_rps=round(point.goodput_rps, 3),
            meets_slo=point.meets_slo,
            valid=point.valid,
        )

    def status(self, line: str) -> None:
        log.info("run.status", status=line)

    def outcome(self, line: str) -> None:
        log.info("run.status", status=line)
