"""What another speculative-decoding choice should do, priced from the acceptance the server
measured.

Where the incumbent speculates, its points carry vLLM's spec-decode counters
(``SpecReading``): the share of drafts accepted at each position and the share of decoding
sequences that drafted at all. Each choice of the knob (off, or a method with k draft tokens)
is priced by ``kneepoint.physics.speculation`` at the knee's batch: the tokens a draft of k
yields against the longer step that verifies it, the step growing as the server's own points
showed. Where the incumbent does not speculate, no acceptance has been measured; the rule
keeps its prior (a modest gain at low concurrency) and says that it is one.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import JsonValue

from kneepoint.physics.speculation import step_speedup, tokens_per_draft
from kneepoint.policies.pruning.knob_effects import (
    MAX_RATIO,
    NOTHING_GAINED,
    Effect,
    Situation,
)
from kneepoint.records.diagnosis import Observation
from kneepoint.records.loadpoint import SpecReading

PRIOR_RATIO = 1.15
"""The unmeasured prior: n-gram speculation at a small batch (no acceptance read yet)."""
PRIOR_MAX_RUNNING = 16
"""Sequences per step past which the prior rules speculation out: a fuller batch pays for
every verified token (``kneepoint.physics.speculation``)."""


def speculation(sit: Situation) -> Effect | str:
    reading = sit.observation.saturated.signals.speculation
    current = sit.observation.engine.speculative_config
    if current is not None:
        if reading is None:
            return (
                "speculative decoding is configured, but the server exported no spec-decode "
                "counters to price another draft length from"
            )
        return _measured(sit, reading, _draft_tokens(current))
    running = sit.observation.saturated.signals.running_mean or 0.0
    if running > PRIOR_MAX_RUNNING:
        return f"{running:.0f} sequences run at once: speculation would waste compute and hurt"
    reason = (
        f"only {running:.0f} sequences per step: n-gram speculation turns weight reads into "
        "several tokens per step (a prior: no acceptance measured yet)"
    )
    return Effect("to", PRIOR_RATIO, reason)


def _draft_tokens(choice: JsonValue) -> int:
    """A choice's draft length (0: speculation off)."""
    if not isinstance(choice, dict):
        return 0
    k = choice.get("num_speculative_tokens")
    return k if isinstance(k, int) else 0


def draft_prices(
    observation: Observation, reading: SpecReading, current_k: int, choices: Sequence[JsonValue]
) -> list[tuple[float, JsonValue]] | str:
    """Each choice's capacity ratio over the incumbent's draft length ``current_k``, from the
    measured acceptance at the knee's batch; why none can be priced otherwise."""
    share = reading.draft_share
    signals = observation.saturated.signals
    running, tokens = signals.running_mean, signals.tokens_per_step_mean
    if share is None or not tokens or not running:
        return "the spec-decode counters read no decoding steps to price from"
    response = observation.response
    elasticity = response.elasticity if response is not None else 1.0

    def speed(k: int) -> float:
        drafted = tokens_per_draft(reading.accepted_by_position, k)
        return step_speedup(
            drafted, share, k, batch=running, step_tokens=tokens, elasticity=elasticity
        )

    now = speed(current_k)
    return [(speed(_draft_tokens(c)) / now, c) for c in choices if _draft_tokens(c) != current_k]


def _measured(sit: Situation, reading: SpecReading, current_k: int) -> Effect | str:
    """The best other choice, each priced from the measured acceptance at the knee's batch."""
    priced = draft_prices(sit.observation, reading, current_k, sit.choices)
    if isinstance(priced, str):
        return priced
    if not priced:
        return "no other draft length to try"
    ratio, best = max(priced, key=lambda p: p[0])
    signals = sit.observation.saturated.signals
    response = sit.observation.response
    elasticity = response.elasticity if response is not None else 1.0
    shares = ", ".join(f"{p:.2f}" for p in reading.accepted_by_position)
    said = (
        f"drafts accepted by position {shares} ({reading.draft_share or 0.0:.0%} of decoding "
        f"steps drafted, {reading.acceptance_length or 1.0:.2f} tokens a draft) at "
        f"{signals.running_mean or 0.0:.0f} sequences a step, steps growing as "
        f"tokens^{elasticity:.2f}"
    )
    k = _draft_tokens(best)
    what = "speculation off" if k == 0 else f"{k} draft tokens"
    if ratio < NOTHING_GAINED:
        return f"{said}: no other choice gains ({what} priced {ratio:.2f}x)"
    return Effect("to", min(MAX_RATIO, ratio), f"{said}: {what} {ratio:.2f}x", target=best)
