"""A person's view of a running study on a terminal: the phase, a bar of the sweep's points,
the incumbent and the budget. Off a terminal the run is reported as structured events only."""

from __future__ import annotations

import sys
from typing import TextIO

from kneepoint.agent.progress import LogProgress
from kneepoint.records.loadpoint import LoadPoint

_BAR = 20


class ConsoleProgress(LogProgress):
    """Structured events (to the log file, if any) plus lines a person can follow."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self._label, self._done, self._expected = "", 0, 0
        self._open_line = False

    def _line(self, text: str) -> None:
        if self._open_line:
            self.stream.write("\n")
            self._open_line = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def phase(self, name: str, detail: str = "", expected_points: int | None = None) -> None:
        super().phase(name, detail, expected_points)
        self._label, self._done, self._expected = "", 0, expected_points or 0
        self._line(f"> {name}: {detail}" if detail else f"> {name}")

    def sweep(self, label: str, expected_points: int | None) -> None:
        super().sweep(label, expected_points)
        if self._open_line:
            self._line("")
        self._label, self._done, self._expected = label, 0, expected_points or 0

    def point(self, label: str, rate_rps: float, repeat: int, point: LoadPoint) -> None:
        super().point(label, rate_rps, repeat, point)
        if label != self._label:
            self._label, self._done, self._expected = label, 0, 0
        self._done += 1
        expected = max(self._expected, self._done)
        filled = round(_BAR * self._done / expected) if self._expected else _BAR
        bar = "#" * filled + "." * (_BAR - filled) if self._expected else ""
        verdict = "meets SLO" if point.meets_slo else "misses SLO"
        if not point.valid:
            verdict = "client-bound: not counted"
        count = f"{self._done}/{self._expected}" if self._expected else f"point {self._done}"
        self.stream.write(
            f"\r  {label:<20} [{bar}] {count:<9} r{repeat} {rate_rps:8.2f} req/s: {verdict}, "
            f"goodput {point.goodput_rps:.2f}   "
        )
        self.stream.flush()
        self._open_line = True

    def status(self, line: str) -> None:
        super().status(line)
        self._line(f"  {line}")


def progress_for(stream: TextIO = sys.stderr) -> LogProgress:
    """Lines for a person on a terminal; structured events only otherwise."""
    return ConsoleProgress(stream) if stream.isatty() else LogProgress()
