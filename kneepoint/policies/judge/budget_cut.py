"""A validation the device-hour budget ends between its phases, pure: where the budget left
does not cover the next phase's expected cost (its pairs at what this validation's pairs have
cost), the run stops at most one phase past its budget rather than a whole validation past it.
The verdict is read from the pairs measured: the judge's over two or more, which promotes only
a gain they show; one pair (the early look, which already declined it) cannot tell a gain from
noise, and the incumbent stays."""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.load import rules
from kneepoint.policies.judge.early import known_noise, look_t, strict_confidence
from kneepoint.policies.judge.promotion import judge
from kneepoint.policies.judge.verdict import arms, measured_repeats, next_repeats
from kneepoint.records import Judgement, StudySpec, Validated, ValidationPart


def next_phase_s(study: StudySpec, parts: Sequence[ValidationPart]) -> float:
    """The next phase's expected device seconds: its pairs at this validation's cost a pair."""
    done = measured_repeats(parts)
    spent = sum(p.device_s for p in parts)
    return len(next_repeats(study, done)) * spent / max(1, done)


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
    pairs = list(zip(rule.by_repeat(incumbent), rule.by_repeat(challenger), strict=False))
    if len(pairs) >= 2:
        verdict = judge(
            [i for i, _ in pairs],
            [c for _, c in pairs],
            min_effect=tuning.min_effect_rel,
            confidence=tuning.confidence,
            seed=study.seed,
        )
        verdict = verdict.model_copy(update={"reason": f"{verdict.reason}; {why}"})
    else:
        verdict = _one_pair(study, pairs[0], known, why)
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
    low = None if gain is None or half is None else gain - half
    high = None if gain is None or half is None else gain + half
    said = "no gain read" if gain is None else f"{gain:+.1%} from one pair"
    return Judgement(
        promote=False,
        method="known_noise",
        n_incumbent=1,
        n_challenger=1,
        incumbent_objective_mean=incumbent,
        challenger_objective_mean=challenger,
        gain_rel=gain,
        gain_low_rel=low,
        gain_high_rel=high,
        min_detectable_effect_rel=None,
        confidence=strict,
        min_effect_rel=tuning.min_effect_rel,
        reason=f"{said}, which cannot tell a gain from noise: the incumbent stays; {why}",
    )
