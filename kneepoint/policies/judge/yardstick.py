"""How far a run's screens read above its validations: the yardstick between them.

A screen is one short knee search (``tuning.screen_seconds`` points); the incumbent's
objective comes from validation repeats at a ladder of rates around its knee. The two read one
configuration differently: on the simulator's scheduling-bound scenario (2026-11-29) the
starting configuration's knee search read 0.7% above its repeats, promoted trials screened
-3.1%, +3.3% and +2.4% against what their validations measured, and four long shots that changed
nothing the sim models (a chunk budget either way, fp8 KV, eager mode) each screened +3.2%
over the incumbent, cleared the 3% floor and spent a validation of three paired repeats to
measure -1.7%. A screen is read on the validations' yardstick by dividing it by the run's own
median ratio of the two, measured on the same configurations, once it has ``MIN_PAIRS`` of
them. One pair is the noise itself: on the agentic quickstart the start's knee search read
11.3% above its repeats, every screen was divided by that (fp8 weights with fp8 KV +7.2%,
a 4,096-token chunk budget +9.6%: both read below the floor), nothing was ever validated to
give a second pair, and the run stopped on its patience at its start, 44.84 req/s against
the grid's 92.27 (benchmarks/regret.py, 2026-11-29).

A few pairs that disagree are no yardstick either: the yardstick is their median shrunk toward
no bias by its own uncertainty (positive-part James-Stein on the log ratios, the median's
squared standard error over its square). On the agentic quickstart three pairs read 1.113,
1.061 and 0.862 (the winner's screen stopped at a 50% bracket, 74-111 req/s); their median,
1.061, turned 512 sequences' +5.2% screen into -0.8%, while two long shots that change nothing
the simulator models there screened +0.0% and +0.7% over the incumbent: the yardstick at that
level was 1.00, and 512 sequences measure +5.6% on the grid (benchmarks/regret.py,
2026-12-03). Scheduling-bound's six pairs, 0.98-1.05, agree enough to keep most of theirs
(1.015 of a median 1.021), and its no-ops' +3.1% screens stay under the floor.
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
