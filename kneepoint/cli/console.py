"""A person's view of a running study: the phase, each sweep's points with the time left, the
standing after each trial. On a terminal a sweep is one bar redrawn in place; anywhere else
(a log file, a pipe, a scheduler's capture) every line is plain, timestamped and final, so an
unattended run's stderr shows where it is from its first minute. Every call is also a
structured event (``LogProgress``) for the run's events.jsonl."""

from __future__ import annotations

import logging
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from kneepoint.measure import LogProgress, duration
from kneepoint.records import LoadPoint

_BAR = 20
_PROGRESS_LOGGER = LogProgress.__module__  # the progress port's own logger


def point_words(rate_rps: float, repeat: int, point: LoadPoint) -> str:
    verdict = "meets SLO" if point.meets_slo else "misses SLO"
    verdict = point.invalid_reason() or f"{verdict} {_judged_by(point)}"
    share = point.goodput_rps / rate_rps if rate_rps else 0.0
    # "meets SLO, goodput 16.78 (40%)" leaves a reader to guess what 40% counts, and "meets
    # SLO by its percentiles; goodput 16.78 req/s, 40% of requests each within every limit"
    # still reads as a contradiction: the verdict holds the window's pooled
    # percentiles to the limits, goodput holds each request to them on its own latencies
    # (its own p95 gap among them), a stricter rule near the knee. Each names its rule.
    rule = (
        "by vLLM's rule"
        if point.goodput_rule == "vllm"
        else "within every limit on their own latencies"
    )
    # Counted from the capped client's slot, the schedule's figure rides along: a reader
    # comparing with an uncapped run must not take one origin for the other.
    origin = (
        f" (from the client's slot; {point.goodput_from_schedule_rps:.2f} from the schedule)"
        if point.goodput_from_schedule_rps is not None
        else ""
    )
    return (
        f"r{repeat} {rate_rps:8.2f} req/s: {verdict}; per request, {share:.0%} {rule} "
        f"(goodput {point.goodput_rps:.2f} req/s){origin}"
    )


def _judged_by(point: LoadPoint) -> str:
    """What decided the verdict: a point that met every latency limit can still miss on a
    backlog that grew over its window (``kneepoint.load.backlog``)."""
    found = point.backlog
    if found is None or found.margin <= 1.0:
        return "by the window's percentiles"
    grew = f"{found.start_requests} -> {found.end_requests} requests waiting or in flight"
    alone = len(point.violations) == 1  # the backlog's own line
    judged = "its" if alone else "the window's percentiles and its"
    return f"by {judged} backlog ({grew})"


class _Sweep:
    """The points of the sweep being measured, and how long they took. Its expected count is
    what it plans at most: a sweep that finds its knee early stops short of it."""

    def __init__(self, label: str = "", expected: int | None = None) -> None:
        self.label, self.expected, self.done = label, expected or 0, 0
        self.started = self.last = time.monotonic()
        self.paces: list[float] = []
        """Seconds between one point's end and the next's: the first point's own time holds
        the server's start (minutes for vLLM), and once made every early estimate jump."""

    def tick(self) -> None:
        now = time.monotonic()
        if self.done:
            self.paces.append(now - self.last)
        self.last, self.done = now, self.done + 1

    def left(self) -> str:
        """Time the planned points left would take at the median pace so far (an upper
        bound: the sweep may end early)."""
        if not self.expected or not self.paces or self.done >= self.expected:
            return ""
        left = statistics.median(self.paces) * (self.expected - self.done)
        return f", up to ~{duration(left)} left" if left >= 1.0 else ""

    def count(self) -> str:
        if self.expected and self.done <= self.expected:
            return f"{self.done} of ≤{self.expected}"
        return f"point {self.done}"

    def took(self) -> str:
        took = duration(time.monotonic() - self.started)
        return f"{self.done} point{'s' * (self.done != 1)} in {took}"


class LineProgress(LogProgress):
    """Plain, final lines, each with its UTC time: for stderr that is not a terminal."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self._sweep = _Sweep()

    def _line(self, text: str) -> None:
        stamp = datetime.now(UTC).strftime("%H:%M:%SZ")
        self.stream.write(f"{stamp} {text}\n")
        self.stream.flush()

    def phase(self, name: str, detail: str = "", expected_points: int | None = None) -> None:
        super().phase(name, detail, expected_points)
        self._end_sweep()
        self._line(f"> {name}: {detail}" if detail else f"> {name}")
        self._sweep = _Sweep("", expected_points)

    def sweep(self, label: str, expected_points: int | None) -> None:
        super().sweep(label, expected_points)
        self._end_sweep()
        self._sweep = _Sweep(label, expected_points)

    def point(self, label: str, rate_rps: float, repeat: int, point: LoadPoint) -> None:
        super().point(label, rate_rps, repeat, point)
        self._follow(label)
        sweep = self._sweep
        sweep.tick()
        self._line(
            f"  {label} {sweep.count()} {point_words(rate_rps, repeat, point)}{sweep.left()}"
        )

    def _follow(self, label: str) -> None:
        """The sweep a point belongs to: a phase's points take its label and its count."""
        sweep = self._sweep
        if label == sweep.label:
            return
        if not sweep.label and not sweep.done:
            sweep.label = label
            return
        self._end_sweep()
        self._sweep = _Sweep(label)

    def _end_sweep(self) -> None:
        """A sweep that stopped short of its planned count says so, and what it took."""
        sweep = self._sweep
        if sweep.done and sweep.expected and sweep.done < sweep.expected:
            self._line(f"  {sweep.label} done: {sweep.took()} (planned at most {sweep.expected})")

    def status(self, line: str) -> None:
        super().status(line)
        self._line(f"  {line}")

    def outcome(self, line: str) -> None:
        # The sweep's own "done" line first: it came after the trial's verdict it led to.
        LogProgress.outcome(self, line)
        self._end_sweep()
        self._sweep = _Sweep()
        self._line(f"  {line}")


class ConsoleProgress(LineProgress):
    """One bar per sweep, redrawn in place; a log line or the next phase first finishes it."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        super().__init__(stream)
        self._open = False
        _finish_bars_before_logs(self)

    def _line(self, text: str) -> None:
        self.finish_bar()
        self.stream.write(text + "\n")
        self.stream.flush()

    def finish_bar(self) -> None:
        """End the open bar's line, as complete: the points a sweep did not need (it found
        its knee early) were never going to be measured."""
        if not self._open:
            return
        sweep = self._sweep
        self.stream.write(f"\r  {sweep.label:<20} [{'#' * _BAR}] {sweep.took()}\x1b[K\n")
        self.stream.flush()
        self._open = False

    def _end_sweep(self) -> None:
        self.finish_bar()  # the finished bar says what the sweep took

    def point(self, label: str, rate_rps: float, repeat: int, point: LoadPoint) -> None:
        LogProgress.point(self, label, rate_rps, repeat, point)
        self._follow(label)
        sweep = self._sweep
        sweep.tick()
        shown = min(sweep.done, sweep.expected) if sweep.expected else 0
        filled = round(_BAR * shown / sweep.expected) if sweep.expected else 0
        bar = "#" * filled + "." * (_BAR - filled)
        words = point_words(rate_rps, repeat, point)
        line = f"  {label:<20} [{bar}] {sweep.count():<9} {words}{sweep.left()}"
        # One screen line, or each redraw leaves the wrapped part of the last one behind.
        width = shutil.get_terminal_size().columns - 1
        self.stream.write(f"\r{line[:width]}\x1b[K")
        self.stream.flush()
        self._open = True


class _FinishBar(logging.Filter):
    """Lets a log line through only after the open progress bar's line is ended, so a warning
    never lands in the middle of a bar."""

    def __init__(self, progress: ConsoleProgress) -> None:
        super().__init__()
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != _PROGRESS_LOGGER:  # progress's own events are the bar's, not news
            self.progress.finish_bar()
        return True


def _finish_bars_before_logs(progress: ConsoleProgress) -> None:
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if stream is progress.stream:
            handler.addFilter(_FinishBar(progress))


def progress_for(stream: TextIO = sys.stderr) -> LogProgress:
    """Bars on a terminal; plain timestamped lines otherwise."""
    return ConsoleProgress(stream) if stream.isatty() else LineProgress(stream)
