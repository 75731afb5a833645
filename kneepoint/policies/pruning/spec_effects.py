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

from pydantic import JsonValue

from kneepoint.physics.speculation import Drafting, throughput_ratio, tokens_per_draft
from kneepoint.policies.pruning.knob_effects import (
    MAX_RATIO,
    NOTHING_GAINED,
    Effect,
    Situation,
    async_gain,
)
from kneepoint.records.diagnosis import ServerResponse
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
        return _measured(sit, reading, current)
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


SYNC_METHODS = frozenset({"ngram", "suffix", "medusa", "mlp_speculator"})
"""Methods with which vLLM turns async scheduling off ("Async scheduling not supported with
ngram-based speculative decoding and will be disabled": vLLM 0.32, config/vllm.py; EAGLE,
MTP, draft models and the GPU n-gram keep it)."""


def draft_prices(
    sit: Situation, reading: SpecReading, current: JsonValue
) -> tuple[list[tuple[float, JsonValue, str]], list[str]] | str:
    """Each other choice's capacity ratio over the incumbent's draft ``current``, from the
    measured acceptance at the knee's batch (``throughput_ratio``), and what it regains or
    loses of async scheduling, and why the others cannot be priced; why none can be priced
    at all otherwise."""
    share = reading.draft_share
    signals = sit.observation.saturated.signals
    running, tokens = signals.running_mean, signals.tokens_per_step_mean
    if share is None or not tokens or not running:
        return "the spec-decode counters read no decoding steps to price from"
    response = sit.observation.response
    if response is None:
        return "no step response was read at the knee to price a draft length from"

    def drafting(choice: JsonValue) -> Drafting:
        k = _draft_tokens(choice)
        return Drafting(k, share, tokens_per_draft(reading.accepted_by_position, k))

    now, regained = drafting(current), _async_regained(sit, current)
    priced, unpriced = [], []
    for choice in sit.choices:
        if _draft_tokens(choice) == _draft_tokens(current):
            continue
        then = drafting(choice)
        outside = _outside_response(response, now, then, running, tokens)
        if outside is not None:
            unpriced.append(outside)
            continue
        ratio = throughput_ratio(now, then, batch=running, step_tokens=tokens,
                                 elasticity=response.elasticity)  # fmt: skip
        note = ""
        if choice is None and regained is not None:
            ratio *= regained[0]
            note = f", async scheduling back ({regained[1]})"
        priced.append((ratio, choice, note))
    return priced, unpriced


EXTRAPOLATION = 1.25
"""How far past the tokens per step its two points spanned a step response prices a step
(``ceiling.LINE_SPREAD``'s 1.25). vLLM's CPU build, greedy n-gram drafts accepted 3.97
tokens a draft: steps of 883 tokens at the knee (its response read over 798-883), speculation
off ran 244 (measured), and the power law priced off at 0.81x where it measured 0.62x
(benchmarks/README.md's speculation_cpu.py): per-sequence work, not tokens, set those steps."""


def _outside_response(
    response: ServerResponse, now: Drafting, then: Drafting, running: float, tokens: float
) -> str | None:
    """Why a draft length cannot be priced: its steps would carry tokens far outside what
    the knee's step response was read over."""
    decode = running * now.verified
    grown = then.gain / now.gain
    after = max(0.0, tokens - decode) * grown + running * then.verified
    low, high = response.low_tokens_per_step, response.high_tokens_per_step
    if low / EXTRAPOLATION <= after <= high * EXTRAPOLATION:
        return None
    k = then.k
    what = "speculation off" if k == 0 else f"{k} draft tokens"
    return (
        f"{what} would run steps of ~{after:.0f} tokens where the knee's step response was "
        f"read over {low:.0f}-{high:.0f}: too far to price from it (measure it instead)"
    )


def _async_regained(sit: Situation, current: JsonValue) -> tuple[float, str] | None:
    """What turning speculation off gains back where vLLM turned async scheduling off for
    the incumbent's method and the study leaves it to vLLM's default (on)."""
    method = current.get("method") if isinstance(current, dict) else None
    if method not in SYNC_METHODS or sit.observation.engine.async_scheduling is False:
        return None
    gain, busy = async_gain(sit)
    return gain, f"{gain:.2f}x at a {busy:.0%} busy {sit.observation.gpu.kind}"


def _measured(sit: Situation, reading: SpecReading, current: JsonValue) -> Effect | str:
    """The best other choice, each priced from the measured acceptance at the knee's batch."""
    found = draft_prices(sit, reading, current)
    if isinstance(found, str):
        return found
    priced, unpriced = found
    if not priced:
        return "; ".join(unpriced) or "no other draft length to try"
    ratio, best, note = max(priced, key=lambda p: p[0])
    note += "".join(f"; {why}" for why in unpriced)
    signals, response = sit.observation.saturated.signals, sit.observation.response
    assert response is not None  # draft_prices priced nothing without one
    shares = ", ".join(f"{p:.2f}" for p in reading.accepted_by_position)
    said = (
        f"drafts accepted by position {shares} ({reading.draft_share or 0.0:.0%} of decoding "
        f"steps drafted, {reading.acceptance_length or 1.0:.2f} tokens a draft) at "
        f"{signals.running_mean or 0.0:.0f} sequences a step, steps growing as "
        f"tokens^{response.elasticity:.2f}"
    )
    k = _draft_tokens(best)
    what = "speculation off" if k == 0 else f"{k} draft tokens"
    if ratio < NOTHING_GAINED:
        return f"{said}: no other choice gains ({what} priced {ratio:.2f}x{note})"
    return Effect("to", min(MAX_RATIO, ratio), f"{said}: {what} {ratio:.2f}x{note}", target=best)
