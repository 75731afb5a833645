"""A validation's judgement from its measured parts, pure: ``kneepoint tune`` measures a
validation's repeats on one GPU, a pool splits them over several (``kneepoint.tune.dispatch``);
both judge what came back here, so they promote alike.

The rule: on one GPU the judge looks first at the first interleaved pair, against the
incumbent's known noise (``kneepoint.policies.judge.early``: only a gain far beyond it is
promoted there); then at the first ``validate_repeats`` repeats; when the gain looks worth
having but they cannot tell it from noise, as many repeats again are measured (once), and the
judge decides on all of them. Several GPUs free for one validation measure its first
``validate_repeats`` side by side, where an early look would save no time.
"""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.load import merge, rules
from kneepoint.policies.judge.contention import out_of_contention
from kneepoint.policies.judge.early import early_look
from kneepoint.policies.judge.promotion import judge
from kneepoint.records import Judgement, StudySpec, SweepResult, Validated, ValidationPart


def measured_repeats(parts: Sequence[ValidationPart]) -> int:
    """Repeats the parts cover (they are measured in order: phase by phase, no gaps)."""
    return max((p.after for p in parts), default=0)


def next_repeats(study: StudySpec, covered: int, side_by_side: int = 1) -> range:
    """A validation's next phase of repeats, ``covered`` measured so far: the early look's
    one pair (where one GPU is free for it, ``side_by_side``, so that it costs no time), the
    rest of the first ``validate_repeats``, then as many again."""
    tuning = study.tuning
    if covered == 0 and side_by_side == 1 and tuning.early_look:
        return range(1)
    n = tuning.validate_repeats
    return range(covered, n) if covered < n else range(n, 2 * n)


def judged(
    study: StudySpec, trial: int, parts: Sequence[ValidationPart], known: Sequence[float] = ()
) -> Validated | None:
    """The validation of ``trial`` once a phase of its parts is in: its failure, if a part
    failed; else the judge's verdict on every repeat (``known``: the incumbent's objective
    over its own repeats, for the early look). None: the phase cannot tell a gain worth
    having from noise, and the next phase is wanted."""
    ordered = sorted(parts, key=lambda p: p.first_repeat)
    spent = sum(p.device_s for p in ordered)
    failure = next((p.failure for p in ordered if p.failure is not None), None)
    if failure is not None:
        return Validated(trial=trial, failure=failure, device_s=spent)
    incumbent, challenger = arms(ordered)
    tuning, rule = study.tuning, rules(study.objective)
    pairs = list(zip(rule.by_repeat(incumbent), rule.by_repeat(challenger), strict=False))
    if measured_repeats(ordered) < tuning.validate_repeats:
        early = _early(study, pairs, known)
        if early is None:
            return None
        return Validated(
            trial=trial,
            incumbent=incumbent,
            challenger=challenger,
            judgement=early,
            device_s=spent,
        )
    verdict = judge(
        list(rule.by_repeat(incumbent)),
        list(rule.by_repeat(challenger)),
        min_effect=tuning.min_effect_rel,
        confidence=tuning.confidence,
        seed=study.seed,
    )
    if measured_repeats(ordered) <= tuning.validate_repeats and underpowered(verdict, study):
        return None
    return Validated(
        trial=trial,
        incumbent=incumbent,
        challenger=challenger,
        judgement=verdict,
        device_s=spent,
    )


def outrun(
    study: StudySpec,
    trial: int,
    parts: Sequence[ValidationPart],
    winner: Validated | None,
    known: Sequence[float],
) -> Validated | None:
    """The validation of ``trial``, part-way through, closed because its pairs so far put it
    below the round's ``winner`` (``kneepoint.policies.judge.contention``); None where they
    do not (or a part failed: its own validation then says so)."""
    measured = [p for p in parts if p.incumbent is not None and p.challenger is not None]
    won = winner.judgement if winner is not None else None
    if won is None or not measured or len(measured) < len(parts):
        return None
    ordered = sorted(measured, key=lambda p: p.first_repeat)
    incumbent, challenger = arms(ordered)
    rule, tuning = rules(study.objective), study.tuning
    judgement = out_of_contention(
        rule.by_repeat(incumbent),
        rule.by_repeat(challenger),
        won,
        known,
        min_effect=tuning.min_effect_rel,
        confidence=tuning.confidence,
    )
    if judgement is None:
        return None
    return Validated(
        trial=trial,
        incumbent=incumbent,
        challenger=challenger,
        judgement=judgement,
        device_s=sum(p.device_s for p in ordered),
    )


def arms(ordered: Sequence[ValidationPart]) -> tuple[SweepResult, SweepResult]:
    """The incumbent's and the challenger's legs over parts that measured both, each merged."""
    incumbent = merge([p.incumbent for p in ordered if p.incumbent is not None])
    challenger = merge([p.challenger for p in ordered if p.challenger is not None])
    return incumbent, challenger


def _early(
    study: StudySpec, pairs: Sequence[tuple[float, float]], known: Sequence[float]
) -> Judgement | None:
    """The early look's promotion, where its one pair measured both arms."""
    if len(pairs) != 1:
        return None
    (incumbent, challenger), tuning = pairs[0], study.tuning
    return early_look(
        incumbent,
        challenger,
        known,
        min_effect=tuning.min_effect_rel,
        confidence=tuning.confidence,
    )


def underpowered(verdict: Judgement, study: StudySpec) -> bool:
    """Not promoted, though the gain is worth having and its interval reaches zero."""
    worth = (verdict.gain_rel or 0.0) >= study.tuning.min_effect_rel
    return not verdict.promote and worth and (verdict.gain_low_rel or 0.0) <= 0.0
