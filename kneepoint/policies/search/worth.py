"""Whether a move is worth a trial out of the budget left: its prediction is a prior with a
spread, not a promise.

A move predicted at ratio ``r`` is taken to measure ``r * exp(s * Z)``, Z standard normal, ``s``
the spread of the run's own prediction errors (log measured / predicted), shrunk toward the
spread of the errors the project has recorded before it has any. The move's expected gain is
what it gives beyond 1 when it beats the incumbent by the floor (the larger of the noise and
the least effect worth promoting), nothing otherwise:

    E[(X - 1) 1{X > 1 + floor}] = r exp(s^2 / 2) Phi(d + s) - Phi(d),  d = ln(r / (1 + floor)) / s

It pays while that gain is at least the floor times the trial's share of the budget left:
spending the rest of the budget on trials like it would then be expected to gain at least one
least-worthwhile effect. With the budget nearly spent only sure moves pay; with most of a night
left, a move predicted at 1.01x is still worth its quarter hour: moves predicted that close
to 1 have measured several percent (``RECORDED_ERRORS``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kneepoint.records import Outcome, TrialPrice

RECORDED_ERRORS: tuple[tuple[str, float, float, str], ...] = (
    ("enable_prefix_caching", 2.50, 2.47, "vLLM CPU build, cpu-tiny-multiturn (benchmarks/README)"),
    ("enable_prefix_caching", 1.97, 1.77, "simulator, quickstart multiturn (benchmarks/README)"),
    ("kv_cache_memory_bytes", 2.50, 2.99, "vLLM CPU build, 2.25 MiB pool, tests/test_real_tune.py"),
    ("gpu_memory_utilization", 1.66, 1.36, "real H100, 0.3 -> 0.5"),
    ("max_num_batched_tokens", 1.04, 1.08, "simulator, quickstart trial 1"),
    ("max_num_seqs", 1.07, 0.98, "simulator, quickstart trial 2"),
    ("kv_cache_dtype", 1.05, 1.073, "simulator, held-out 7B on A100"),
)
"""Predicted against measured ratios of single-knob moves the project has recorded, after
the latency ceiling (policies/pruning/ceiling.py) bounded batch-growing moves."""


def _rms_log_error(errors: Sequence[float]) -> float:
    return math.sqrt(sum(e * e for e in errors) / len(errors))


PRIOR_SPREAD_LOG = round(_rms_log_error([math.log(m / p) for _, p, m, _ in RECORDED_ERRORS]), 3)
"""The recorded errors' root mean square, in log ratio (0.115: a prediction is good to about
12% before the run has measured any of its own)."""
PRIOR_WEIGHT = 2.0
"""The prior spread counts as this many of the run's own errors."""


def spread_log(own_errors: Sequence[float]) -> float:
    """The spread of the next prediction's error: the run's own log errors pooled with the
    recorded spread, weighted as ``PRIOR_WEIGHT`` errors."""
    squares = PRIOR_WEIGHT * PRIOR_SPREAD_LOG**2 + sum(e * e for e in own_errors)
    return math.sqrt(squares / (PRIOR_WEIGHT + len(own_errors)))


def phi(x: float) -> float:
    """The standard normal distribution function."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def chance(price: TrialPrice, ratio: float) -> float:
    """The chance that a move predicted at ``ratio`` beats the incumbent by the floor."""
    return phi(_d(price, ratio))


def expected_gain(price: TrialPrice, ratio: float) -> float:
    """The expected gain over 1 of a move predicted at ``ratio``, counting only a gain beyond
    the floor (see the module docstring)."""
    d, s = _d(price, ratio), price.spread_log
    return ratio * math.exp(s * s / 2.0) * phi(d + s) - phi(d)


def pays(price: TrialPrice, ratio: float) -> bool:
    """A move predicted at ``ratio`` is expected to pay for its share of the budget left."""
    return expected_gain(price, ratio) >= price.floor_rel * price.cost_share


def worth_a_trial(price: TrialPrice | None, ratio: float, min_gain: float) -> bool:
    """With a price (``tuning.stop: budget``), whether the move pays; without one, whether it
    is predicted beyond ``min_gain``."""
    return ratio > 1.0 + min_gain if price is None else pays(price, ratio)


def no_loss_ratio(outcome: Outcome, reference: float | None, min_gain: float) -> float | None:
    """A measured move's ratio to the incumbent's objective ``reference`` where it was no loss
    (at most ``min_gain`` below it); None for a loss, a failure or no reference. The step-ons
    and the combination step build on such moves."""
    if outcome.status != "ok" or outcome.objective is None or not reference:
        return None
    ratio = outcome.objective / reference
    return ratio if ratio >= 1.0 - min_gain else None


def words(price: TrialPrice, ratio: float) -> str:
    """ "a 41% chance of beating the 3.0% floor, 2.1% expected; a trial is 4% of the budget
    left"."""
    return (
        f"a {chance(price, ratio):.0%} chance of beating the {price.floor_rel:.1%} floor, "
        f"{expected_gain(price, ratio):.1%} expected; a trial is {price.cost_share:.0%} of "
        "the budget left"
    )


def _d(price: TrialPrice, ratio: float) -> float:
    return math.log(ratio / (1.0 + price.floor_rel)) / price.spread_log
