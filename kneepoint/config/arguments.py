"""Command-line numbers checked as they are parsed: a rate, a duration or a port that is not a
finite number in its range is one ``kneepoint:`` line and exit 2 (argparse's own error path),
not a traceback from deep in the load planner (``--knee-rps nan`` raised ValueError, ``sim
serve --port 99999`` OverflowError, ``sweep --start-rps -1`` ran until interrupted)."""

from __future__ import annotations

import argparse
import math

from kneepoint.records import MAX_POINT_SECONDS, MAX_RATE_RPS


def _finite(text: str, low: float, high: float, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not low < value <= high:
        raise argparse.ArgumentTypeError(
            f"{what} must be above {low:g} and at most {high:g}, got {text!r}"
        )
    return value


def positive(text: str) -> float | None:
    """A finite number above 0 (a price), or None where the text is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def rate_rps(text: str) -> float:
    """An offered rate in requests per second."""
    return _finite(text, 0.0, MAX_RATE_RPS, "a rate in req/s")


def seconds(text: str) -> float:
    """A duration in seconds."""
    return _finite(text, 0.0, MAX_POINT_SECONDS, "a duration in seconds")


def port(text: str) -> int:
    """A TCP port to listen on."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {text!r}")
    return value
