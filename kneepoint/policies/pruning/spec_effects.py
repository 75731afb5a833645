"""What another speculative-decoding choice should do, priced from the acceptance the server
measured.

The acceptance comes from vLLM's spec-decode counters (``SpecReading``): the share of drafts
accepted at each position and the share of decoding sequences that drafted at all. Where the
incumbent speculates, its own points carry them; where it does not, the run's acceptance probe
read them off the starting configuration with drafts on (``kneepoint.tune.acceptance_step``).
Each choice of the knob (off, or a method with k draft tokens) is priced by
``kneepoint.physics.speculation`` at the knee's batch: the tokens a draft of k yields against
the longer step that verifies it, the step growing as the server's own points showed, and the
CPU work vLLM then runs between steps rather than beside them where the method turns async
scheduling off. With neither reading the rule keeps its prior (a modest gain at low
concurrency) and says that it is one.
"""

from __future__ import annotations

from pydantic import JsonValue

from kneepoint.physics import (
    Drafting,
    tokens_per_draft,
)
from kneepoint.policies.pruning.knob_effects import (
    MAX_RATIO,
    NOTHING_GAINED,
    Effect,
    Situation,
)
from kneepoint.policies.pruning.spec_steps import paced_room, step_growth
from kneepoint.records import AcceptanceProbe, SpecReading

PRIOR_RATIO = 1.15
"""The unmeasured prior: n-gram speculation at a small, bandwidth-bound batch (no acceptance
read yet: ``kneepoint diagnose``, or a run that does not probe)."""
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
    probe = sit.observation.acceptance
    if probe is not None:
        return _probed(sit, probe)
    if sit.binding != "bandwidth":
        return (
            f"{sit.binding} binds, and no acceptance has been measured: a prior prices "
            "speculation only where decode streams the weights for few tokens (bandwidth)"
        )
    running = sit.observation.saturated.signals.running_mean or 0.0
    if running > PRIOR_MAX_RUNNING:
        return f"{running:.0f} sequences run at once: speculation would waste compute and hurt"
    reason = (
        f"only {running:.0f} sequences per step: n-gram speculation turns weight reads into "
        "several tokens per step (a prior: no acceptance measured yet)"
    )
    return Effect("to", PRIOR_RATIO, reason)


def _probed(sit: Situation, probe: AcceptanceProbe) -> Effect | str:
    """Turning speculation on, priced from the acceptance probe's counters."""
    k = _draft_tokens(probe.speculative_config)
    said = f"the acceptance probe ({k}-token n-gram drafts at {probe.rate_rps:.3g} req/s)"
    if probe.failure is not None:
        return f"{said} failed: {probe.failure}"
    if probe.reading is None:
        return f"{said} read no spec-decode counters from the server to price drafts from"
    return _measured(sit, probe.reading, None, source=f"{said}: ")


def _draft_tokens(choice: JsonValue) -> int:
    """A choice's draft length (0: speculation off)."""
    if not isinstance(choice, dict):
        return 0
    k = choice.get("num_speculative_tokens")
    return k if isinstance(k, int) else 0


def draft_prices(
    sit: Situation, reading: SpecReading, current: JsonValue
) -> tuple[list[tuple[float, JsonValue, str]], list[str]] | str:
    """Each other choice's capacity ratio over the incumbent's draft ``current``: the output
    its drafts yield at the knee's batch (the measured acceptance) over the step that
    verifies them (``spec_steps``), and why the others cannot be priced; why none can be
    priced at all otherwise."""
    share = reading.draft_share
    signals = sit.observation.saturated.signals
    running, tokens = signals.running_mean, signals.tokens_per_step_mean
    if share is None or not tokens or not running:
        return "the spec-decode counters read no decoding steps to price from"

    def drafting(choice: JsonValue) -> Drafting:
        k = _draft_tokens(choice)
        return Drafting(k, share, tokens_per_draft(reading.accepted_by_position, k))

    now = drafting(current)
    priced, unpriced = [], []
    for choice in sit.choices:
        if _draft_tokens(choice) == _draft_tokens(current):
            continue
        then = drafting(choice)
        growth = step_growth(sit, now, then, current, choice)
        if isinstance(growth, str):
            unpriced.append(growth)
            continue
        gained = then.gain / now.gain
        room, paced = paced_room(sit, gained, growth.ratio)
        priced.append((gained / growth.ratio * room, choice, growth.words + paced))
    return priced, unpriced


def _measured(
    sit: Situation, reading: SpecReading, current: JsonValue, source: str = ""
) -> Effect | str:
    """The best other choice, each priced from the measured acceptance at the knee's batch
    (``source``: where the acceptance was read, when not at the knee itself)."""
    found = draft_prices(sit, reading, current)
    if isinstance(found, str):
        return found
    priced, unpriced = found
    if not priced:
        return "; ".join(unpriced) or "no other draft length to try"
    ratio, best, note = max(priced, key=lambda p: p[0])
    note += "".join(f"; {why}" for why in unpriced)
    signals, response = sit.observation.saturated.signals, sit.observation.response
    shares = ", ".join(f"{p:.2f}" for p in reading.accepted_by_position)
    grows = f", steps growing as tokens^{response.elasticity:.2f}" if response else ""
    said = (
        f"{source}drafts accepted by position {shares} "
        f"({reading.draft_share or 0.0:.0%} of decoding steps drafted, "
        f"{reading.acceptance_length or 1.0:.2f} tokens a draft) at "
        f"{signals.running_mean or 0.0:.0f} sequences a step{grows}"
    )
    k = _draft_tokens(best)
    what = "speculation off" if k == 0 else f"{k} draft tokens"
    if ratio < NOTHING_GAINED:
        return f"{said}: no other choice gains ({what} priced {ratio:.2f}x{note})"
    return Effect("to", min(MAX_RATIO, ratio), f"{said}: {what} {ratio:.2f}x{note}", target=best)
