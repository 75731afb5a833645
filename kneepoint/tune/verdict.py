"""A validation's judgement from its measured parts, pure: ``kneepoint tune`` measures a
validation's repeats on one GPU, the workers of a shared study split them over several
(``kneepoint.workers.plan``); both judge what came back here, so they promote alike.

The rule: the judge reads the first ``validate_repeats`` repeats; when the gain looks worth
having but they cannot tell it from noise, as many repeats again are measured (once), and the
judge decides on all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from kneepoint.load.objective import rules
from kneepoint.measure.sweep import merge
from kneepoint.policies.judge.promotion import judge
from kneepoint.records.judgement import Judgement
from kneepoint.records.ledger import Validated
from kneepoint.records.study import StudySpec
from kneepoint.records.task import ValidationPart


def measured_repeats(parts: Sequence[ValidationPart]) -> int:
    """Repeats the parts cover (they are measured in order: phase by phase, no gaps)."""
    return max((p.after for p in parts), default=0)


def judged(study: StudySpec, trial: int, parts: Sequence[ValidationPart]) -> Validated | None:
    """The validation of ``trial`` once its parts are in: its failure, if a part failed;
    else the judge's verdict on every repeat. None: the first phase cannot tell a gain worth
    having from noise, and as many repeats again are wanted."""
    ordered = sorted(parts, key=lambda p: p.first_repeat)
    spent = sum(p.device_s for p in ordered)
    failure = next((p.failure for p in ordered if p.failure is not None), None)
    if failure is not None:
        return Validated(trial=trial, failure=failure, device_s=spent)
    incumbent = merge([p.incumbent for p in ordered if p.incumbent is not None])
    challenger = merge([p.challenger for p in ordered if p.challenger is not None])
    tuning, rule = study.tuning, rules(study.objective)
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


def underpowered(verdict: Judgement, study: StudySpec) -> bool:
    """Not promoted, though the gain is worth having and its interval reaches zero."""
    worth = (verdict.gain_rel or 0.0) >= study.tuning.min_effect_rel
    return not verdict.promote and worth and (verdict.gain_low_rel or 0.0) <= 0.0
