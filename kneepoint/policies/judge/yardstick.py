"""How far a run's screens read above its validations: the yardstick between them.

A screen is one short knee search (``tuning.screen_seconds`` points); the incumbent's
objective comes from validation repeats at a ladder of rates around its knee. The two read one
configuration differently, by a few percent either way: enough for moves that change nothing
to screen past the 3% floor and spend validations (benchmarks/regret.py's scheduling-bound
study). A screen is read on the validations' yardstick by dividing it by the run's own median
ratio of the two, measured on the same configurations, once it has ``MIN_PAIRS`` of them. One
pair is the noise itself: divided by one pair's error, every screen can read below the floor,
nothing is validated to give a second pair, and the run stops at its start
(benchmarks/regret.py's agentic study).

A few pairs that disagree are no yardstick either: the yardstick is their median shrunk toward
no bias by its own uncertainty (positive-part James-Stein on the log ratios, the median's
squared standard error over its square), so pairs that scatter leave screens near as read and
pairs that agree keep most of their median (benchmarks/regret.py's agentic and
scheduling-bound studies).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_PAIRS = 2


def screen_bias(pairs: Sequence[tuple[float, float]]) -> float:
    """The median ratio of a configuration's screen to its validated objective over
    ``pairs`` (screen, validated), positive values only, shrunk toward 1.0 by how far the
    pairs disagree; 1.0 with fewer than ``MIN_PAIRS``."""
    logs = [math.log(s / v) for s, v in pairs if s > 0 and v > 0]
    if len(logs) < MIN_PAIRS:
        return 1.0
    middle = statistics.median(logs)
    if middle == 0.0:
        return 1.0
    # The standard error of the mean stands in for the median's: a few pairs say no more.
    squared_error = statistics.variance(logs) / len(logs)
    return math.exp(middle * max(0.0, 1.0 - squared_error / middle**2))
