"""A knob its rule ruled out, as the long shots move it (``Pruning.long_shots``): priced at
1.0, nothing vouching for a gain, and leaning the way its rule would move it were another
constraint it acts on to bind, so the long shots try that way first
(``kneepoint.policies.search.long_shots``); and the price its rule gives it were the runner-up
to bind, which the ruled-out reason quotes for whoever doubts the verdict.

A running cap the knee never came near leans down, not up: raising it leaves the server as it
was, so a first try upward measures the start again (benchmarks/regret.py's agentic study).
"""

from __future__ import annotations

from kneepoint.policies.diagnosis import CAP_PINNED_FROM
from kneepoint.policies.pruning.knob_effects import Effect, Rule, Situation, if_bound
from kneepoint.records import Constraint, Direction, Knob, KnobCandidate


def long_shot(
    knob: Knob, target: Constraint, why_out: str, rule: Rule | None, situation: Situation
) -> KnobCandidate:
    """The long shot of ``knob``, ruled out for ``why_out``, leaning as ``lean`` says."""
    return KnobCandidate(
        knob=knob,
        direction=lean(knob, rule, situation),
        relieves=target,
        predicted_ratio=1.0,
        reason=f"a long shot: ruled out ({why_out})",
        needs_quality_check=knob.changes_outputs,
    )


def lean(knob: Knob, rule: Rule | None, situation: Situation) -> Direction:
    """The way ``rule`` would move a numeric knob were a constraint it acts on to bind (the
    runner-up first, as the ruled-out reason quotes it, then the others; the first that gives
    a direction), else ``to``. A running cap the knee never came near leans down: raising it
    changes nothing."""
    if rule is None or not knob.domain.numeric:
        return "to"
    if knob.name == "max_num_seqs" and not _cap_reached(situation):
        return "down"
    for _, effect in if_bound(knob.acts_on, rule, situation):
        if isinstance(effect, Effect) and effect.direction in ("up", "down"):
            return effect.direction
    return "to"


def _cap_reached(situation: Situation) -> bool:
    """Whether the saturated point's running sequences came near the running cap at their
    peak (the share from which a cap reads pinned, ``CAP_PINNED_FROM``)."""
    signals = situation.observation.saturated.signals
    running = signals.running_max if signals.running_max is not None else signals.running_mean
    return running is None or running >= CAP_PINNED_FROM * situation.engine.max_num_seqs


def as_runner_up(knob: Knob, rule: Rule | None, situation: Situation) -> str:
    """What the knob's rule says were the runner-up to bind, where the knob acts on it: the
    price of a move the verdict rules out, for whoever doubts the verdict."""
    runner = situation.diagnosis.runner_up
    constraint, effect = next(if_bound(knob.acts_on, rule, situation), (None, ""))
    if runner is None or constraint != runner:
        return ""
    if isinstance(effect, Effect):
        target = "default" if effect.target is None else effect.target
        move = f"to {target}" if effect.direction == "to" else effect.direction
        return f" (were {runner} to bind: {move}, predicted at {effect.ratio:.2f}x)"
    return f" (were {runner} to bind: {effect})"
