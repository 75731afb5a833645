"""Whether a finalist part-way through its validation can still beat the round's winner.

With several GPUs a round's finalists are validated side by side, and a promotion closes the
rest of its round; so the winner waits for the finalists whose validation has begun
(``kneepoint.tune.dispatch``), lest it close a better one (benchmarks/regret.py's rag study
on several GPUs). A finalist whose pairs so far put its gain below the winner's, at the
validation's early look's strict confidence, cannot be the better one, and waiting for it only
spends its remaining repeats.

Both gains are measured against the one incumbent, in pairs (incumbent, challenger). Each
pair's relative difference has a spread of about sqrt(2) times the incumbent's known noise
(``kneepoint.policies.judge.early``), so the difference of the winner's mean gain over ``n_w``
pairs and the finalist's over ``n_f`` has a spread of ``noise * sqrt(2 / n_w + 2 / n_f)``,
bounded by Student's t at the known repeats' degrees of freedom.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from kneepoint.policies.judge.early import (
    known_noise,
    known_noise_judgement,
    look_t,
    strict_confidence,
)
from kneepoint.records import Judgement


def out_of_contention(
    incumbent: Sequence[float],
    challenger: Sequence[float],
    winner: Judgement,
    known: Sequence[float],
    *,
    min_effect: float = 0.03,
    confidence: float = 0.95,
) -> Judgement | None:
    """The verdict closing a finalist whose pairs (``incumbent``, ``challenger``: each pair's
    objectives) put it, at the early look's confidence, below the round's ``winner`` (its
    judgement against the same incumbent; ``known``: the incumbent's objective over its own
    repeats); None where they do not, the noise is not known or nothing was measured: the
    winner then waits for it."""
    noise = known_noise(known, min_effect)
    pairs = [(i, c) for i, c in zip(incumbent, challenger, strict=False) if i > 0]
    if noise is None or not pairs or winner.gain_rel is None:
        return None
    strict = strict_confidence(confidence)
    half = look_t(known, strict) * noise * math.sqrt(2.0 / winner.n_challenger + 2.0 / len(pairs))
    gain = statistics.fmean(c / i - 1.0 for i, c in pairs)
    if gain + half >= winner.gain_rel:
        return None
    means = (statistics.fmean(i for i, _ in pairs), statistics.fmean(c for _, c in pairs))
    reason = (
        f"{gain:+.1%} over {len(pairs)} paired repeat{'s' if len(pairs) > 1 else ''} is "
        f"below the round's winner ({winner.gain_rel:+.1%}) by more than the incumbent's "
        f"{noise:.1%} noise allows (at {strict:.1%}): closed with the winner's promotion, "
        "its other repeats not measured"
    )
    return known_noise_judgement(
        means,
        len(pairs),
        gain=gain,
        half=half,
        strict=strict,
        min_effect=min_effect,
        reason=reason,
        promote=False,
    )
