"""The judge: promote a challenger only when its gain over the incumbent exceeds the noise.

Validation measures the two arms interleaved (incumbent, challenger, incumbent, ...), so repeat
i of each arm shares the machine's state at that time: with equal counts the repeats are pairs
and a paired t test on their differences removes drift common to both. Unequal counts fall
back to Welch's t; a percentile bootstrap is there on request. Gains are relative to the
incumbent's mean, and a challenger is promoted only when the interval's lower end is above zero
*and* the gain reaches the minimum effect worth a change. A single repeat of an arm says nothing
about noise, so it never promotes.

``is_finalist`` is the screening tier's cheaper question: whether one screened measurement
reads far enough past the incumbent to be worth a validation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from kneepoint.policies.judge.stats import t_quantile
from kneepoint.records import FinalistCheck, Judgement, RepeatsMethod

_POWER = 0.8
"""The power at which the minimum detectable effect is quoted."""
_RESAMPLES = 4000


class _Estimate(NamedTuple):
    """Challenger mean minus incumbent mean, its interval and detectable effect (absolute)."""

    difference: float
    low: float
    high: float
    detectable: float


def judge(
    incumbent: Sequence[float],
    challenger: Sequence[float],
    *,
    min_effect: float = 0.03,
    confidence: float = 0.95,
    method: Literal["auto"] | RepeatsMethod = "auto",
    seed: int = 0,
) -> Judgement:
    """Compare repeated objective measurements (higher is better) of two configurations."""
    base, chal = _checked("incumbent", incumbent), _checked("challenger", challenger)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1) (got {confidence})")
    chosen = _method(method, len(base), len(chal))
    base_mean, chal_mean = statistics.fmean(base), statistics.fmean(chal)
    common = {
        "method": chosen,
        "n_incumbent": len(base),
        "n_challenger": len(chal),
        "incumbent_objective_mean": base_mean,
        "challenger_objective_mean": chal_mean,
        "confidence": confidence,
        "min_effect_rel": min_effect,
    }
    gain = chal_mean / base_mean - 1.0 if base_mean > 0 else None
    if min(len(base), len(chal)) < 2:
        return Judgement(
            promote=False,
            gain_rel=gain,
            gain_low_rel=None,
            gain_high_rel=None,
            min_detectable_effect_rel=None,
            reason=_single_reason(gain, len(base), len(chal)),
            **common,
        )
    estimate = _estimate(chosen, base, chal, confidence, seed)
    if base_mean <= 0:
        promote = estimate.low > 0
        verdict = "promote" if promote else "keep the incumbent"
        reason = (
            f"the incumbent's objective averaged {base_mean:.3g} and the challenger's "
            f"{chal_mean:.3g} [{base_mean + estimate.low:.3g}, {base_mean + estimate.high:.3g}] "
            f"{_over(chosen, len(base), len(chal))}: {verdict}"
        )
        return Judgement(
            promote=promote,
            gain_rel=None,
            gain_low_rel=None,
            gain_high_rel=None,
            min_detectable_effect_rel=None,
            reason=reason,
            **common,
        )
    relative = _Estimate(*(value / base_mean for value in estimate))
    promote = relative.low > 0 and relative.difference >= min_effect
    return Judgement(
        promote=promote,
        gain_rel=relative.difference,
        gain_low_rel=relative.low,
        gain_high_rel=relative.high,
        min_detectable_effect_rel=relative.detectable,
        reason=_reason(relative, min_effect, _over(chosen, len(base), len(chal))),
        **common,
    )


def is_finalist(
    screen_objective: float | None,
    incumbent_objective: float | None,
    incumbent_noise_rel: float,
    min_effect: float = 0.03,
    *,
    screen_bias: float = 1.0,
    validated_gain: float | None = None,
) -> FinalistCheck:
    """Whether one screened measurement is worth a validation.

    The screen must read beyond ``min_effect`` over the incumbent; within the incumbent's
    noise (``incumbent_noise_rel``, the relative standard deviation of its objective over
    repeats) is enough, for the validation's repeats, not one screen, tell a gain from noise.
    A bar at the noise turns away real gains: a screen a few percent up, inside a noisy
    incumbent's noise, can validate far higher, and the validations it costs are a fraction
    of a device-hour (benchmarks/regret.py's quickstart on 3 GPUs).
    ``screen_bias``: how far screens read above validations in this run
    (``kneepoint.policies.judge.yardstick``); the screen is divided by it first.
    ``validated_gain``: the gain repeated pairs already showed for the same move from the
    incumbent before, where a sibling of its round was promoted instead
    (``kneepoint.tune.execute.outrun_gain``). One screen then has only to confirm it, to read
    above the incumbent: its rungs sit 10% apart, coarser than the gain it is asked about
    (1,024-token chunks above validated +6.6% [+5.5%, +7.6%] from the start and screened
    +2.0% from fp8).
    """
    confirming = validated_gain is not None and validated_gain > 0
    threshold = 0.0 if confirming else min_effect
    if screen_objective is None:
        return FinalistCheck(
            finalist=False,
            gain_rel=None,
            threshold_rel=threshold,
            reason="the screen measured no objective: not a finalist",
        )
    if incumbent_objective is None or incumbent_objective <= 0:
        finalist = screen_objective > 0
        reason = (
            f"the incumbent has no positive objective and the screen measured "
            f"{screen_objective:.3g}: {'a finalist' if finalist else 'not a finalist'}"
        )
        return FinalistCheck(
            finalist=finalist, gain_rel=None, threshold_rel=threshold, reason=reason
        )
    gain = screen_objective / screen_bias / incumbent_objective - 1.0
    finalist = gain > threshold
    shown = _screened(screen_objective / incumbent_objective - 1.0, gain, screen_bias)
    if confirming:
        said = "confirms" if finalist else "does not confirm"
        reason = (
            f"{shown} {said} the {validated_gain:+.1%} its validation showed from the incumbent "
            "before (a sibling of its round was promoted instead)"
        )
    elif not finalist:
        reason = f"{shown} is not beyond the {_pct(min_effect)} minimum effect"
    elif gain > incumbent_noise_rel:
        reason = f"{shown} clears the {_pct(min_effect)} minimum effect and the noise"
    else:
        reason = (
            f"{shown} clears the {_pct(min_effect)} minimum effect, inside the incumbent's "
            f"{_pct(incumbent_noise_rel)} noise: its repeats will tell"
        )
    verdict = "validate it" if finalist else "not a finalist"
    return FinalistCheck(
        finalist=finalist, gain_rel=gain, threshold_rel=threshold, reason=f"{reason}: {verdict}"
    )


def _screened(raw: float, gain: float, screen_bias: float) -> str:
    """ "screened +2.0%", or with a bias "screened +2.0%, +1.3% read as a validation (...),"."""
    if screen_bias == 1.0:
        return f"screened {gain:+.1%}"
    return (
        f"screened {raw:+.1%}, {gain:+.1%} read as a validation (this run's screens read "
        f"{screen_bias - 1.0:+.1%} against its validations),"
    )


def _checked(arm: str, values: Sequence[float]) -> list[float]:
    if not values:
        raise ValueError(f"{arm}: no measurements")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{arm}: measurements must be finite (got {list(values)})")
    return [float(v) for v in values]


def _method(method: Literal["auto"] | RepeatsMethod, n_base: int, n_chal: int) -> RepeatsMethod:
    if method == "auto":
        return "paired_t" if n_base == n_chal else "welch"
    if method == "paired_t" and n_base != n_chal:
        raise ValueError(f"paired_t needs as many repeats of each arm (got {n_base} and {n_chal})")
    return method


def _estimate(
    method: RepeatsMethod, base: list[float], chal: list[float], confidence: float, seed: int
) -> _Estimate:
    if method == "bootstrap":
        return _bootstrap(base, chal, confidence, seed)
    if method == "paired_t":
        diffs = [c - b for b, c in zip(base, chal, strict=True)]
        error, df = statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs) - 1.0
    else:
        error, df = _welch(base, chal)
    difference = statistics.fmean(chal) - statistics.fmean(base)
    t = t_quantile(0.5 + confidence / 2.0, df)
    detectable = (t + t_quantile(_POWER, df)) * error
    return _Estimate(difference, difference - t * error, difference + t * error, detectable)


def _welch(base: list[float], chal: list[float]) -> tuple[float, float]:
    """Standard error of the difference of means and Welch-Satterthwaite degrees of freedom."""
    terms = [statistics.variance(arm) / len(arm) for arm in (base, chal)]
    error = math.sqrt(sum(terms))
    if error == 0.0:
        return 0.0, len(base) + len(chal) - 2.0
    spread = sum(v**2 / (len(arm) - 1) for v, arm in zip(terms, (base, chal), strict=True))
    df = sum(terms) ** 2 / spread
    return error, df


def _bootstrap(base: list[float], chal: list[float], confidence: float, seed: int) -> _Estimate:
    """Percentile bootstrap of the difference of means; pairs resampled together when the
    counts match (interleaved repeats), each arm on its own otherwise."""
    rng = np.random.default_rng(seed)
    b, c = np.asarray(base), np.asarray(chal)
    if len(b) == len(c):
        picks = rng.integers(0, len(b), size=(_RESAMPLES, len(b)))
        diffs = c[picks].mean(axis=1) - b[picks].mean(axis=1)
    else:
        b_means = b[rng.integers(0, len(b), size=(_RESAMPLES, len(b)))].mean(axis=1)
        diffs = c[rng.integers(0, len(c), size=(_RESAMPLES, len(c)))].mean(axis=1) - b_means
    alpha = 1.0 - confidence
    low, high = np.quantile(diffs, [alpha / 2.0, 1.0 - alpha / 2.0])
    normal = statistics.NormalDist()
    detectable = (normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(_POWER)) * float(diffs.std())
    return _Estimate(float(c.mean() - b.mean()), float(low), float(high), detectable)


def _over(method: RepeatsMethod, n_base: int, n_chal: int) -> str:
    if method == "welch":
        return f"over {n_base} vs {n_chal} repeats (Welch)"
    if method == "bootstrap":
        paired = "paired " if n_base == n_chal else ""
        counts = f"{n_base}" if n_base == n_chal else f"{n_base} vs {n_chal}"
        return f"over {counts} {paired}repeats (bootstrap)"
    return f"over {n_base} paired repeats"


def _reason(relative: _Estimate, min_effect: float, over: str) -> str:
    gain, low, high = relative.difference, relative.low, relative.high
    measured = f"{gain:+.1%} [{low:+.1%}, {high:+.1%}] {over}"
    minimum = f"the {_pct(min_effect)} minimum effect"
    if low > 0 and gain >= min_effect:
        return f"{measured} exceeds {minimum}: promote"
    if low > 0:
        return f"{measured} is real but below {minimum}: keep the incumbent"
    if high < 0:
        # A loss, not noise, however wide: a challenger that measured 0 in every repeat
        # (its lowest rate missed the SLO) has its whole interval below zero.
        return f"{measured} is a loss (the whole interval lies below zero): keep the incumbent"
    return (
        f"{measured} could be noise (the interval reaches {low:+.1%}; these repeats detect "
        f"gains of {relative.detectable:.1%} or more): keep the incumbent"
    )


def _single_reason(gain: float | None, n_base: int, n_chal: int) -> str:
    measured = f"{gain:+.1%}" if gain is not None else "a gain"
    return (
        f"{measured} from {n_base} vs {n_chal} measurements: a single repeat of an arm cannot "
        "tell a gain from noise, so it never promotes (measure at least 2 repeats of each): "
        "keep the incumbent"
    )


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"
