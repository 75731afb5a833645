"""The loop's steps that measure: each runs its sweeps through the bench and returns the event
the ledger records. Pure decisions (diagnosis, pruning, finalist, judge) come from policies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from kneepoint.load import merge, rules
from kneepoint.measure import Bench, TrialFailedError, validate_pair
from kneepoint.policies.diagnosis import context_of, diagnose, observe_study
from kneepoint.policies.judge import (
    ended_by_budget,
    is_finalist,
    judged,
    measured_repeats,
    next_repeats,
)
from kneepoint.policies.pruning import findings
from kneepoint.records import (
    AcceptanceProbe,
    Baseline,
    BaselinePart,
    Diagnosis,
    EngineConfig,
    KnobCatalogue,
    Outcome,
    Promoted,
    Proposal,
    Pruning,
    QualityChecked,
    Screened,
    StudySpec,
    SweepPoint,
    SweepResult,
    Validated,
    ValidationPart,
    nothing_met,
)
from kneepoint.run import RunFolder
from kneepoint.tune.acceptance_step import probe_acceptance, probe_rate, probed_setting
from kneepoint.tune.quality_step import quality_check

log = structlog.get_logger(__name__)
SCREEN_ATTEMPTS = 2
"""Screens of one proposal: a second, on a new server, where no point of the first could tell
(the host, not the configuration, decided each); a trial is never judged on nothing while a
server start and one more screen can still tell. One more, not more: a host that voids two
screens in a row is busy for longer than a tune should wait on it."""


@dataclass
class Steps:
    study: StudySpec
    folder: RunFolder
    bench: Bench
    catalogue: KnobCatalogue
    vllm_version: str | None = None

    def diagnose(self, config: EngineConfig, result: SweepResult) -> Diagnosis:
        return diagnose(context_of(observe_study(self.study, config, result)))

    def findings(
        self, config: EngineConfig, result: SweepResult, acceptance: AcceptanceProbe | None
    ) -> tuple[Diagnosis, Pruning]:
        """What binds on ``config`` and the knobs worth trying (``acceptance``: the run's
        acceptance probe)."""
        return findings(
            self.study, config, result, self.catalogue, self.vllm_version, acceptance=acceptance
        )

    def baseline(self) -> Baseline:
        """The starting configuration: its knee search, then its repeats around the knee."""
        knee = self.baseline_knee()
        n = self.study.tuning.validate_repeats
        parts = [self.baseline_repeats(knee, range(n))] if repeats_wanted(self.study, knee) else []
        return self.baseline_of(knee, parts)

    def baseline_knee(self) -> BaselinePart:
        """The starting configuration's knee search, and the acceptance probe after it where
        the study searches speculation (``kneepoint.tune.acceptance_step``)."""
        config = self.study.engine
        self.bench.progress.phase("baseline", "knee search of the starting configuration")
        trial_dir = self.folder.trial_dir(0, config)
        knee, knee_s = self.bench.knee(config, trial_dir)
        setting = probed_setting(self.study, self.catalogue, self.vllm_version)
        if setting is None or not knee.points:
            return BaselinePart(sweep=knee, device_s=knee_s)
        probe = probe_acceptance(self.bench, trial_dir, config, setting, probe_rate(knee))
        return BaselinePart(sweep=knee, device_s=knee_s + probe.device_s, acceptance=probe)

    def baseline_repeats(self, knee: BaselinePart, repeats: range) -> BaselinePart:
        """``repeats`` of the starting configuration around its knee (on one server)."""
        config = self.study.engine
        around = knee.sweep.capacity_rps or min(p.rate_rps for p in knee.sweep.points)
        self.bench.progress.phase("baseline", "the starting configuration, repeated")
        rates = rules(self.study.objective).repeat_rates(around)
        trial_dir = self.folder.trial_dir(0, config)
        result, spent = self.bench.repeats(config, trial_dir, rates, knee.sweep.points, repeats)
        first, n = repeats.start, len(repeats)
        return BaselinePart(first_repeat=first, repeats=n, sweep=result, device_s=spent)

    def baseline_of(self, knee: BaselinePart, parts: Sequence[BaselinePart]) -> Baseline:
        """The Baseline its knee search and repeats make, diagnosed. With no repeats (no
        rate met the SLO: repeats around nothing would only spend device time) its knee
        search stands for them."""
        config, ordered = self.study.engine, sorted(parts, key=lambda p: p.first_repeat)
        repeats = knee.sweep if not ordered else ordered[0].sweep
        if len(ordered) > 1:
            repeats = merge([p.sweep for p in ordered])
        # what binds is read at the knee: the repeats' points where the knee search never
        # saw a counted failure and they did (they climb past their range)
        seen = knee.sweep
        if knee.sweep.floor_reason is not None and ordered:
            seen = merge([knee.sweep, repeats], kind="knee")
        diagnosis, pruning = self.findings(config, seen, knee.acceptance)
        return Baseline(
            config=config,
            knee=knee.sweep,
            repeats=repeats,
            diagnosis=diagnosis,
            pruning=pruning,
            device_s=knee.device_s + sum(p.device_s for p in ordered),
            acceptance=knee.acceptance,
        )

    def screen(
        self,
        trial: int,
        proposal: Proposal,
        incumbent_knee: float,
        incumbent: SweepResult,
        bias: float = 1.0,
        *,
        validated_gain: float | None = None,
    ) -> Screened:
        """One short look at the proposal; a finalist where it reads beyond the minimum
        effect over the incumbent, on the validations' yardstick (``bias``: ``screen_bias``),
        or where it confirms the gain its move was validated at from the incumbent before
        (``validated_gain``: ``kneepoint.tune.execute.outrun_gain``)."""
        config, objective = proposal.config, self.study.objective
        trial_dir = self.folder.trial_dir(trial, config)
        # per GPU, a server twice as wide ties the incumbent at twice its knee: look there
        around = (
            incumbent_knee
            * rules(objective).width(config)
            / rules(objective).width(incumbent.config)
        )
        spent = 0.0
        try:
            for attempt in range(1, SCREEN_ATTEMPTS + 1):
                result, took = self._screen_once(config, trial_dir, around)
                spent += took
                if not result.could_not_tell:
                    break
                log.warning("screen.could_not_tell", trial=trial, attempt=attempt)
        except TrialFailedError as exc:
            outcome = Outcome(status=exc.status, detail=exc.cause)
            return Screened(
                trial=trial, outcome=outcome, reason=exc.cause, device_s=spent + exc.device_s
            )
        measured = rules(objective).value(result)
        if measured is None and result.could_not_tell:
            outcome = Outcome(status="invalid_measurement", detail=nothing_met(result))
        elif measured is None:
            outcome = Outcome(status="infeasible", detail=nothing_met(result))
        else:
            outcome = Outcome(status="ok", objective=measured, feasible=measured > 0)
        check = is_finalist(
            measured,
            rules(objective).value(incumbent),
            rules(objective).noise_rel(incumbent),
            self.study.tuning.min_effect_rel,
            screen_bias=bias,
            validated_gain=validated_gain,
        )
        return Screened(
            trial=trial,
            outcome=outcome,
            sweep=result,
            diagnosis=self.diagnose(config, result),
            finalist=check.finalist,
            reason=check.reason if measured is not None else f"{check.reason}: {outcome.detail}",
            device_s=spent,
        )

    def _screen_once(
        self, config: EngineConfig, trial_dir: Path, around: float
    ) -> tuple[SweepResult, float]:
        """One screen of ``config`` on its own server: its sweep and the device time spent."""
        if rules(self.study.objective).screens_knee:
            return self.bench.screen(config, trial_dir, around)
        # one look at the rates the objective is read at
        rates = rules(self.study.objective).repeat_rates(around)
        return self.bench.measure(config, trial_dir, rates, "screen")

    def quality(
        self, trial: int, incumbent: EngineConfig, challenger: EngineConfig
    ) -> QualityChecked:
        """Greedy answers to fixed prompts from both configurations, compared token by token."""
        return quality_check(
            self.bench, self.folder.trial_dir(trial, challenger), trial, incumbent, challenger
        )

    def validate(
        self,
        trial: int,
        against: tuple[EngineConfig, float],
        screened: Screened,
        challenger: EngineConfig,
        *,
        incumbent_points: Sequence[SweepPoint] = (),
        known: Sequence[float] = (),
        left_s: float | None = None,
    ) -> Validated:
        """The finalist and the incumbent (``against``: its config and its knee; its
        measured points, ``incumbent_points``; ``known``: its objective over its repeats),
        interleaved, over the objective's rates, phase by phase until the judge decides
        (``kneepoint.policies.judge.verdict``: the early look's one pair, the first
        ``validate_repeats``, as many again), or until the device seconds of the budget
        ``left_s`` (None: no budget) do not cover the next phase
        (``kneepoint.policies.judge.budget_cut``)."""
        parts: list[ValidationPart] = []
        while True:
            ended = ended_by_budget(self.study, trial, parts, known, left_s)
            if ended is not None:
                log.info("validate.cut_short", trial=trial)
                return ended
            repeats = next_repeats(self.study, measured_repeats(parts))
            part = self.validate_part(
                trial,
                against,
                screened,
                challenger,
                incumbent_points=incumbent_points,
                repeats=repeats,
                earlier=parts,
            )
            parts.append(part)
            validated = judged(self.study, trial, parts, known)
            if validated is not None:
                return validated
            if repeats.stop >= self.study.tuning.validate_repeats:
                log.info("validate.more_repeats", trial=trial)

    def validate_part(
        self,
        trial: int,
        against: tuple[EngineConfig, float],
        screened: Screened,
        challenger: EngineConfig,
        *,
        incumbent_points: Sequence[SweepPoint],
        repeats: range,
        earlier: Sequence[ValidationPart] = (),
    ) -> ValidationPart:
        """``repeats`` of the validation on this GPU, both arms over the full range around
        their own knees (``earlier``: parts measured before, which these must not contradict
        without a retake)."""
        incumbent, incumbent_knee = against
        screened_knee = screened.sweep.capacity_rps if screened.sweep is not None else None
        rule = rules(self.study.objective)
        rates = rule.validation_arms(incumbent_knee, screened_knee or incumbent_knee)
        known = {
            "incumbent": [*incumbent_points, *_points(earlier, "incumbent")],
            "challenger": [
                *(screened.sweep.points if screened.sweep else ()),
                *_points(earlier, "challenger"),
            ],
        }
        trial_dir = self.folder.trial_dir(trial, challenger)
        part = ValidationPart(trial=trial, first_repeat=repeats.start, repeats=len(repeats))
        try:
            inc, chal, spent = validate_pair(
                self.bench,
                incumbent,
                challenger,
                trial_dir,
                rates=rates,
                repeats=repeats,
                known=known,
            )
        except TrialFailedError as exc:
            failure = Outcome(status=exc.status, detail=f"during validation: {exc.cause}")
            return part.model_copy(update={"failure": failure, "device_s": exc.device_s})
        update = {"incumbent": inc, "challenger": chal, "device_s": spent}
        return part.model_copy(update=update)

    def promote(
        self,
        trial: int,
        config: EngineConfig,
        validated: Validated,
        acceptance: AcceptanceProbe | None,
    ) -> Promoted:
        """The validated winner as the incumbent, diagnosed (``acceptance``: the run's
        acceptance probe)."""
        repeats = validated.challenger
        assert repeats is not None  # a promoted validation measured the challenger
        diagnosis, pruning = self.findings(config, repeats, acceptance)
        return Promoted(
            trial=trial,
            config=config,
            objective=rules(self.study.objective).value(repeats) or 0.0,
            repeats=repeats,
            diagnosis=diagnosis,
            pruning=pruning,
        )


def _points(parts: Sequence[ValidationPart], arm: str) -> list[SweepPoint]:
    results = (p.incumbent if arm == "incumbent" else p.challenger for p in parts)
    return [point for r in results if r is not None for point in r.points]


def repeats_wanted(study: StudySpec, knee: BaselinePart) -> bool:
    """The baseline's repeats are worth measuring: its knee search found a rate that met
    the SLO, or the objective is not the SLO capacity."""
    return knee.sweep.capacity_rps is not None or not rules(study.objective).is_capacity
