"""The validation's early look: after its first interleaved pair, a gain far beyond the
incumbent's known noise is promoted without the other repeats.

A validation measures ``validate_repeats`` pairs because one pair says nothing about its own
noise. The incumbent's noise is already known, though: its repeats (the baseline's, or those
that promoted it) give its relative standard deviation with ``len - 1`` degrees of freedom.
One pair's relative difference then has a spread of about sqrt(2) times that, the challenger
taken to be as noisy as the incumbent, and a Student t interval at that many degrees of
freedom bounds the gain.

The look is deliberately strict, so that only gains a full validation could hardly fail to
promote stop early:

- the interval is at twice the study's confidence (97.5% for 95%): by Bonferroni's bound the
  extra look adds at most half the study's false-promotion rate (the quickstart with the rag
  mix, 5.3% noise over its baseline's 3 repeats, asks a first pair for more than +49%; at
  99.5% it asked for +108%, and rag's first move, +71% over 3 pairs, did not stop early);
- the noise is taken no smaller than the study's minimum effect: a configuration that
  measured the same twice (the virtual clock's seeded repeats can) has not shown it is quiet;
- the interval's lower end must clear the minimum effect itself, not only zero.

Anything short of that is not a verdict: the validation measures its other repeats and the
paired judge (``kneepoint.policies.judge.promotion``) decides on all of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from kneepoint.policies.judge.stats import t_quantile
from kneepoint.records import Judgement

LOOK_SHARE = 0.5
"""The early look's share of the study's false-promotion rate (1 - confidence)."""


def known_noise(known: Sequence[float], min_effect: float) -> float | None:
    """The incumbent's relative noise over its repeats ``known`` (their relative standard
    deviation, taken no smaller than ``min_effect``); None with fewer than two, or a mean
    that is not positive."""
    if len(known) < 2 or not all(math.isfinite(v) for v in known):
        return None
    known_mean = statistics.fmean(known)
    if known_mean <= 0:
        return None
    return max(statistics.stdev(known) / known_mean, min_effect)


def strict_confidence(confidence: float) -> float:
    """The look's confidence: ``LOOK_SHARE`` of the study's false-promotion rate."""
    return 1.0 - (1.0 - confidence) * LOOK_SHARE


def early_look(
    incumbent: float,
    challenger: float,
    known: Sequence[float],
    *,
    min_effect: float = 0.03,
    confidence: float = 0.95,
) -> Judgement | None:
    """A promotion from one interleaved pair (``incumbent``, ``challenger``: the pair's
    objectives; ``known``: the incumbent's objective over its earlier repeats), or None
    when the pair does not clear the bar."""
    noise = known_noise(known, min_effect)
    if noise is None or incumbent <= 0:
        return None
    strict = strict_confidence(confidence)
    gain = challenger / incumbent - 1.0
    half = look_t(known, strict) * math.sqrt(2.0) * noise
    if gain - half <= min_effect:
        return None
    reason = (
        f"{gain:+.1%} [{gain - half:+.1%}, {gain + half:+.1%}] from the first paired repeat, "
        f"against the incumbent's {noise:.1%} noise over its {len(known)} repeats (at "
        f"{strict:.1%}), exceeds the {min_effect * 100:.3g}% minimum effect: promote without "
        "the other repeats"
    )
    return known_noise_judgement(
        (incumbent, challenger),
        1,
        gain=gain,
        half=half,
        strict=strict,
        min_effect=min_effect,
        reason=reason,
        promote=True,
    )


def look_t(known: Sequence[float], strict: float) -> float:
    """Student's t at ``strict`` (two-sided) with the known repeats' degrees of freedom."""
    return t_quantile(0.5 + strict / 2.0, len(known) - 1.0)


def known_noise_judgement(
    means: tuple[float, float],
    pairs: int,
    *,
    gain: float | None,
    half: float | None,
    strict: float,
    min_effect: float,
    reason: str,
    promote: bool,
) -> Judgement:
    """A verdict from ``pairs`` pairs against the incumbent's known noise (``means``: the
    incumbent's and the challenger's objective; the gain's interval ``gain`` +- ``half``,
    unknown where either is None)."""
    return Judgement(
        promote=promote,
        method="known_noise",
        n_incumbent=pairs,
        n_challenger=pairs,
        incumbent_objective_mean=means[0],
        challenger_objective_mean=means[1],
        gain_rel=gain,
        gain_low_rel=gain - half if gain is not None and half is not None else None,
        gain_high_rel=gain + half if gain is not None and half is not None else None,
        min_detectable_effect_rel=None,
        confidence=strict,
        min_effect_rel=min_effect,
        reason=reason,
    )
