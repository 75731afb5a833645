"""A validation the device-hour budget ends between its phases, pure: where the budget left
does not cover the next phase's expected cost (its pairs at what this validation's pairs have
cost), the run stops at most one phase past its budget rather than a whole validation past it.
The verdict is read from the pairs measured: the judge's over two or more, which promotes only
a gain they show; one pair (the early look, which already declined it) cannot tell a gain from
noise, and the incumbent stays."""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.load import rules
from kneepoint.policies.judge.early import (
    known_noise,
    known_noise_judgement,
    look_t,
    strict_confidence,
)
from kneepoint.policies.judge.promotion import judge
from kneepoint.policies.judge.verdict import arms, measured_repeats, next_repeats
from kneepoint.records import Judgement, StudySpec, Validated, ValidationPart


def next_phase_s(study: StudySpec, parts: Sequence[ValidationPart]) -> float:
    """The next phase's expected device seconds: its pairs at this validation's cost a pair."""
    done = measured_repeats(parts)
    spent = sum(p.device_s for p in parts)
    return len(next_repeats(study, done)) * spent / max(1, done)


def ended_by_budget(
    study: StudySpec,
    trial: int,
    parts: Sequence[ValidationPart],
    known: Sequence[float],
    left_s: float | None,
) -> Validated | None:
    """``trial``'s validation ended here (``cut_short``) where ``left_s``, the budget's
    device seconds left before these ``parts`` (None: no budget), less what they spent, does
    not cover its next phase; None where it may go on."""
    if not parts or left_s is None:
        return None
    left_s -= sum(p.device_s for p in parts)
    if next_phase_s(study, parts) <= left_s:
        return None
    return cut_short(study, trial, parts, known, left_s)


def cut_short(
    study: StudySpec,
    trial: int,
    parts: Sequence[ValidationPart],
    known: Sequence[float],
    left_s: float,
) -> Validated:
    """``trial``'s validation ended with ``left_s`` device seconds of the budget left, which
    do not cover its next phase: the verdict over its measured ``parts`` (``known``: the
    incumbent's objective over its own repeats)."""
    ordered = sorted(parts, key=lambda p: p.first_repeat)
    incumbent, challenger = arms(ordered)
    rule, tuning = rules(study.objective), study.tuning
    why = (
        f"the budget's {max(0.0, left_s):.0f} s left did not cover its next phase "
        f"(~{next_phase_s(study, ordered):.0f} s)"
    )
    incumbents, challengers = list(rule.by_repeat(incumbent)), list(rule.by_repeat(challenger))
    if len(challengers) >= 2:
        verdict = judge(
            incumbents,
            challengers,
            min_effect=tuning.min_effect_rel,
            confidence=tuning.confidence,
            seed=study.seed,
        )
        verdict = verdict.model_copy(update={"reason": f"{verdict.reason}; {why}"})
    else:
        verdict = _one_pair(study, (incumbents[0], challengers[0]), known, why)
    return Validated(
        trial=trial,
        incumbent=incumbent,
        challenger=challenger,
        judgement=verdict,
        device_s=sum(p.device_s for p in ordered),
    )


def _one_pair(
    study: StudySpec, pair: tuple[float, float], known: Sequence[float], why: str
) -> Judgement:
    """One pair read against the incumbent's known noise, never a promotion."""
    tuning = study.tuning
    incumbent, challenger = pair
    gain = challenger / incumbent - 1.0 if incumbent > 0 else None
    noise = known_noise(known, tuning.min_effect_rel)
    strict = strict_confidence(tuning.confidence)
    half = None if noise is None else look_t(known, strict) * 2.0**0.5 * noise
    said = "no gain read" if gain is None else f"{gain:+.1%} from one pair"
    return known_noise_judgement(
        pair,
        1,
        gain=gain,
        half=half,
        strict=strict,
        min_effect=tuning.min_effect_rel,
        reason=f"{said}, which cannot tell a gain from noise: the incumbent stays; {why}",
        promote=False,
    )
