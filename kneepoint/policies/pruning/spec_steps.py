"""How long the knee's step would take under another speculative-decoding choice: the step
that verifies longer (or shorter) drafts, beside the CPU work vLLM runs between steps where a
method turns async scheduling off.

Within what the knee's step response spanned (its two points' tokens per step, 1.25x either
way) the server's own power law prices it. Past that, the response says little: read across
rates, it grew as its batch grew, and a longer draft grows the tokens each sequence verifies,
not the sequences (per-sequence work, the CPU's scheduling and sampling, stays). There the
roofline prices both steps at the knee's shape (``observed_shape``), its ratio scaled onto
the step the server ran. vLLM's CPU build, greedy drafts at 3.97 tokens a draft and 119
sequences a step: its response grew as tokens^1.01 over 175-240 tokens (the power law prices
3 draft tokens at 0.92x, measured 1.61x); the roofline's step ratio at 857 tokens, 2.06x, is
the 2.05x the server ran (75 against 36.6 ms: tests/fixtures/real/cpu-tiny-ngram).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import JsonValue

from kneepoint.physics import (
    SYNC_METHODS,
    BatchShape,
    Drafting,
    ResolvedEngine,
    Roofline,
    cpu_seconds,
    kv_layout,
    step_tokens_then,
    throughput_ratio,
)
from kneepoint.policies.diagnosis import observed_shape
from kneepoint.policies.pruning.batch_effects import TAIL_AT_LIMIT
from kneepoint.policies.pruning.ceiling import compute_ceiling, slo_limits, tightest_limit
from kneepoint.policies.pruning.knob_effects import Situation, async_gain
from kneepoint.records import Efficiency

EXTRAPOLATION = 1.25
"""How far past the tokens per step its two points spanned a step response prices a step
(``ceiling.LINE_SPREAD``'s 1.25). vLLM's CPU build, greedy n-gram drafts accepted 3.97
tokens a draft: steps of 883 tokens at the knee (its response read over 798-883), speculation
off ran 244 (measured), and the power law priced off at 0.81x where it measured 0.62x
(benchmarks/README.md's speculation_cpu.py): per-sequence work, not tokens, set those steps."""


@dataclass(frozen=True, slots=True)
class StepGrowth:
    """The knee's step under another choice over the step it ran, and how it was priced."""

    ratio: float
    words: str


def method(choice: JsonValue) -> JsonValue:
    """A choice's speculative method (None: speculation off)."""
    return choice.get("method") if isinstance(choice, dict) else None


def step_growth(
    sit: Situation, now: Drafting, then: Drafting, current: JsonValue, choice: JsonValue
) -> StepGrowth | str:
    """The knee's step under ``choice`` over under ``current``; why it cannot be priced."""
    signals, response = sit.observation.saturated.signals, sit.observation.response
    running, tokens = signals.running_mean or 0.0, signals.tokens_per_step_mean or 0.0
    after = step_tokens_then(now, then, batch=running, step_tokens=tokens)
    if response is not None:
        low, high = response.low_tokens_per_step, response.high_tokens_per_step
        if low / EXTRAPOLATION <= after <= high * EXTRAPOLATION:
            gained = throughput_ratio(
                now, then, batch=running, step_tokens=tokens, elasticity=response.elasticity
            )
            ratio = then.gain / now.gain / gained
            serial, regained = _async_lost(sit, current, choice), _async_regained(sit, current)
            if serial is not None:
                return StepGrowth(ratio + serial[0], f", async scheduling off ({serial[1]})")
            if regained is not None and method(choice) not in SYNC_METHODS:
                return StepGrowth(ratio / regained[0], f", async scheduling back ({regained[1]})")
            return StepGrowth(ratio, "")
    modelled = _roofline_ratio(sit, now, then, current, choice)
    if modelled is None:
        what = "speculation off" if then.k == 0 else f"{then.k} draft tokens"
        spanned = (
            f"the knee's step response was read over {response.low_tokens_per_step:.0f}-"
            f"{response.high_tokens_per_step:.0f}"
            if response is not None
            else "no step response was read at the knee"
        )
        return (
            f"{what} would run steps of ~{after:.0f} tokens where {spanned}, and the "
            "metrics do not describe the knee's step for the roofline (measure it instead)"
        )
    words = (
        f", steps of ~{after:.0f} tokens priced by the roofline at the knee's shape "
        f"({modelled:.2f}x as long{_sync_words(current, choice)})"
    )
    return StepGrowth(modelled, words)


def _roofline_ratio(
    sit: Situation, now: Drafting, then: Drafting, current: JsonValue, choice: JsonValue
) -> float | None:
    """The roofline's time for the knee's step under ``then`` over under ``now``: its decodes
    verifying the other drafts and its prefills grown with the gain, each step with the CPU
    work its async setting leaves between steps."""
    obs, engine = sit.observation, sit.engine
    found = observed_shape(obs.saturated.signals, obs.workload, kv_layout(obs.model, engine))
    if found is None:
        return None
    shape, _ = found
    tokens = float(shape.new_tokens)
    after = step_tokens_then(now, then, batch=float(shape.num_requests), step_tokens=tokens)
    grow = after / tokens
    later = shape._replace(
        new_tokens=max(1, round(after)),
        attention_pairs=shape.attention_pairs * grow,
        kv_tokens=shape.kv_tokens + round(after - tokens),
        draft_lookups=shape.samples if then.k else 0,
    )
    before = shape._replace(draft_lookups=shape.samples if now.k else 0)
    engines = _engine(sit, current), _engine(sit, choice)
    cost_now, cost_then = (
        Roofline(obs.gpu, obs.model, engine, obs.efficiency).step(batch)
        for engine, batch in zip(engines, (before, later), strict=True)
    )
    # The device's share of the observed step, scaled from the roofline's (a CPU host's
    # roofline ran 8.9 ms where the server took 36.6), then the CPU's work beside it or
    # after it as each setting runs it.
    observed = 1.0 / (obs.saturated.signals.steps_per_s or 1.0 / cost_now.wall_s)
    device = observed - cost_now.cpu_s if not engines[0].async_scheduling else observed
    scale = max(device, 0.5 * observed) / cost_now.gpu_s
    gpu_then = scale * cost_then.gpu_s
    cpu_then = cost_then.cpu_s
    wall = max(gpu_then, cpu_then) if engines[1].async_scheduling else gpu_then + cpu_then
    return wall / observed


def _engine(sit: Situation, choice: JsonValue) -> ResolvedEngine:
    """The incumbent's engine under ``choice``: vLLM turns async scheduling off for a
    method of ``SYNC_METHODS``."""
    engine = sit.engine
    if method(choice) in SYNC_METHODS:
        return engine.model_copy(update={"async_scheduling": False})
    return engine


def _sync_words(current: JsonValue, choice: JsonValue) -> str:
    if method(current) not in SYNC_METHODS and method(choice) in SYNC_METHODS:
        return ", async scheduling off"
    if method(current) in SYNC_METHODS and method(choice) not in SYNC_METHODS:
        return ", async scheduling back"
    return ""


def _async_regained(sit: Situation, current: JsonValue) -> tuple[float, str] | None:
    """What leaving the incumbent's method gains back where vLLM turned async scheduling off
    for it and the study leaves it to vLLM's default (on)."""
    if method(current) not in SYNC_METHODS or sit.observation.engine.async_scheduling is False:
        return None
    gain, busy = async_gain(sit)
    return gain, f"{gain:.2f}x at a {busy:.0%} busy {sit.observation.gpu.kind}"


def _async_lost(sit: Situation, current: JsonValue, choice: JsonValue) -> tuple[float, str] | None:
    """Where ``choice`` turns a method on with which vLLM turns async scheduling off (and the
    incumbent had it): the engine core's CPU work per step (the roofline's constants, n-gram
    lookups included), now run between steps, as a share of the knee's step."""
    if method(current) in SYNC_METHODS or method(choice) not in SYNC_METHODS:
        return None
    if sit.observation.engine.async_scheduling is False:
        return None
    signals = sit.observation.saturated.signals
    running, steps = signals.running_mean or 0.0, signals.steps_per_s
    if not steps:
        return None
    n = max(1, round(running))
    decodes = BatchShape(n, n, 0.0, 0, samples=n, draft_lookups=n)
    eff = sit.observation.efficiency or Efficiency()
    cpu_s = cpu_seconds(eff, decodes, sit.engine.stream_interval)
    return (
        cpu_s * steps,
        f"{cpu_s * 1e3:.2f} ms of CPU work a step after each {1e3 / steps:.1f} ms step",
    )


def paced_room(sit: Situation, gained: float, step: float) -> tuple[float, str]:
    """What a draft length does to the per-token tail the knee failed on, beyond the same
    batch served faster: TPOT falls with the tokens a step yields (``gained``), a chunk's gap
    (ITL: one chunk a step) grows with the step (``step``), and the batch grows or shrinks
    until the tail meets its limit again, as the server's step response prices a bigger
    batch, no further up than the compute ceiling. code-edits (a TPOT p95 knee): drafts
    priced 1.45x at the knee's batch alone, measured 1.77x by `kneepoint sweep` and 1.95x by
    the tune's validation, their TPOT at the knee's batch 11.1 ms where the limit is 16."""
    obs, response = sit.observation, sit.observation.response
    tight = tightest_limit(obs.saturated, slo_limits(obs))
    if tight is None or response is None or response.elasticity <= 0.0:
        return 1.0, ""
    label, seen_ms, limit_ms, _ = tight
    if seen_ms < TAIL_AT_LIMIT * limit_ms:
        return 1.0, ""
    paced_ms = seen_ms * step / gained if " tpot " in f" {label} " else seen_ms * step
    growth = (limit_ms / paced_ms) ** (1.0 / response.elasticity)
    room = response.batch_gain(growth) if growth >= 1.0 else growth
    words = f"; {label} {seen_ms:.1f} ms at the knee would run ~{paced_ms:.1f} ms"
    ceiling = compute_ceiling(obs)
    if ceiling is not None and room > ceiling.ratio:
        return ceiling.ratio, f"{words} (its {limit_ms:g} ms limit leaves {ceiling.reading})"
    return room, f"{words} against its {limit_ms:g} ms limit: the batch {growth:.2f}x, {room:.2f}x"
