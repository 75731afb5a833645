"""The loop's steps that measure: each runs its sweeps through the bench and returns the event
the ledger records. Pure decisions (diagnosis, pruning, finalist, judge) come from policies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from kneepoint.load.objective import rules
from kneepoint.physics.defaults import UnmodeledSettingError, resolve_engine
from kneepoint.physics.memory import plan_memory
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.diagnose import diagnose
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.judge.promotion import is_finalist, judge
from kneepoint.policies.pruning.prune import prune
from kneepoint.probes.sweep import merge
from kneepoint.records.diagnosis import Diagnosis
from kneepoint.records.engine import EngineConfig
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.ledger import Baseline, Promoted, QualityChecked, Screened, Validated
from kneepoint.records.proposal import Outcome, Proposal, Pruning
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepPoint, SweepResult, nothing_met
from kneepoint.tune.bench import Bench
from kneepoint.tune.quality_step import quality_check
from kneepoint.tune.trial_failure import TrialFailedError
from kneepoint.tune.validation import validate_pair

log = structlog.get_logger(__name__)


@dataclass
class Steps:
    study: StudySpec
    bench: Bench
    catalogue: KnobCatalogue
    vllm_version: str | None = None

    def diagnose(self, config: EngineConfig, result: SweepResult) -> Diagnosis:
        return diagnose(context_of(observe_study(self.study, config, result)))

    def findings(self, config: EngineConfig, result: SweepResult) -> tuple[Diagnosis, Pruning]:
        """What binds on ``config`` and the knobs worth trying, from one observation and
        one resolution of the configuration."""
        context = context_of(observe_study(self.study, config, result))
        diagnosis = diagnose(context)
        pruning = prune(
            diagnosis,
            context,
            self.catalogue,
            allowed=self.study.search.knobs,
            vllm_version=self.vllm_version,
            backend=self.study.backend,
            gpus=self.study.gpus,
        )
        return diagnosis, pruning

    def baseline(self) -> Baseline:
        config = self.study.engine
        trial_dir = self.bench.folder.trial_dir(0, config)
        self.bench.progress.phase("baseline", "knee search of the starting configuration")
        knee, knee_s = self.bench.knee(config, trial_dir)
        if knee.capacity_rps is None and rules(self.study.objective).is_capacity:
            # no rate met the SLO: repeats around nothing would only spend device time
            diagnosis, pruning = self.findings(config, knee)
            return Baseline(
                config=config,
                knee=knee,
                repeats=knee,
                diagnosis=diagnosis,
                pruning=pruning,
                device_s=knee_s,
            )
        around = knee.capacity_rps or min(p.rate_rps for p in knee.points)
        self.bench.progress.phase("baseline", "the starting configuration, repeated")
        rates = rules(self.study.objective).repeat_rates(around)
        repeats, repeats_s = self.bench.repeats(config, trial_dir, rates, knee.points)
        # what binds is read at the knee: the repeats' points where the knee search never
        # saw a counted failure and they did (they climb past their range)
        seen = knee if knee.floor_reason is None else merge([knee, repeats], kind="knee")
        diagnosis, pruning = self.findings(config, seen)
        return Baseline(
            config=config,
            knee=knee,
            repeats=repeats,
            diagnosis=diagnosis,
            pruning=pruning,
            device_s=knee_s + repeats_s,
        )

    def preflight(self, trial: int, proposal: Proposal) -> Screened | None:
        """A refusal without starting anything, when the memory model says it cannot start."""
        if not self.study.backend.checks_memory:
            return None
        try:
            engine = resolve_engine(proposal.config, self.study.gpu, self.study.model)
        except UnmodeledSettingError as exc:
            refusal = f"not modelled: {exc}"
        else:
            plan = plan_memory(self.study.gpu, self.study.model, engine)
            if plan.refusal is None:
                return None
            refusal = plan.refusal.message
        outcome = Outcome(status="startup_failed", detail=f"preflight: {refusal}")
        return Screened(trial=trial, outcome=outcome, reason=f"preflight refused: {refusal}")

    def screen(
        self,
        trial: int,
        proposal: Proposal,
        incumbent_knee: float,
        incumbent: SweepResult,
        bias: float = 1.0,
    ) -> Screened:
        """One short look at the proposal; a finalist where it beats the incumbent beyond
        the noise, read on the validations' yardstick (``bias``: ``screen_bias``)."""
        config, objective = proposal.config, self.study.objective
        trial_dir = self.bench.folder.trial_dir(trial, config)
        # per GPU, a server twice as wide ties the incumbent at twice its knee: look there
        around = (
            incumbent_knee
            * rules(objective).width(config)
            / rules(objective).width(incumbent.config)
        )
        try:
            if rules(objective).screens_knee:
                result, spent = self.bench.screen(config, trial_dir, around)
            else:  # one look at the rates the objective is read at
                rates = rules(objective).repeat_rates(around)
                result, spent = self.bench.measure(config, trial_dir, rates, "screen")
        except TrialFailedError as exc:
            outcome = Outcome(status=exc.status, detail=exc.cause)
            return Screened(trial=trial, outcome=outcome, reason=exc.cause, device_s=exc.device_s)
        measured = rules(objective).value(result)
        if measured is None and not any(p.counted for p in result.points) and result.points:
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
            bias,
        )
        return Screened(
            trial=trial,
            outcome=outcome,
            sweep=result,
            diagnosis=self.diagnose(config, result),
            finalist=check.finalist,
            reason=check.reason,
            device_s=spent,
        )

    def quality(
        self, trial: int, incumbent: EngineConfig, challenger: EngineConfig
    ) -> QualityChecked:
        """Greedy answers to fixed prompts from both configurations, compared token by token."""
        return quality_check(self.bench, trial, incumbent, challenger)

    def validate(
        self,
        trial: int,
        against: tuple[EngineConfig, float],
        screened: Screened,
        challenger: EngineConfig,
        incumbent_points: Sequence[SweepPoint] = (),
    ) -> Validated:
        """The finalist and the incumbent (``against``: its config and its knee; its
        measured points, ``incumbent_points``), interleaved, over the objective's rates; when
        the gain looks worth having but the repeats cannot tell it from noise, as many
        repeats again (once), then the judge decides on all of them."""
        incumbent, incumbent_knee = against
        objective = self.study.objective
        screened_knee = screened.sweep.capacity_rps if screened.sweep is not None else None
        rates = rules(objective).validation_arms(incumbent_knee, screened_knee or incumbent_knee)
        tuning = self.study.tuning
        trial_dir = self.bench.folder.trial_dir(trial, challenger)
        n, spent = tuning.validate_repeats, 0.0
        legs: list[tuple[SweepResult, SweepResult]] = []
        known = {
            "incumbent": list(incumbent_points),
            "challenger": list(screened.sweep.points if screened.sweep else ()),
        }
        for repeats in (range(n), range(n, 2 * n)):
            try:
                inc, chal, cost = validate_pair(
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
                return Validated(trial=trial, failure=failure, device_s=spent + exc.device_s)
            legs.append((inc, chal))
            known = {
                "incumbent": [*known["incumbent"], *inc.points],
                "challenger": [*known["challenger"], *chal.points],
            }
            spent += cost
            inc, chal = merge([a for a, _ in legs]), merge([b for _, b in legs])
            verdict = judge(
                list(rules(objective).by_repeat(inc)),
                list(rules(objective).by_repeat(chal)),
                min_effect=tuning.min_effect_rel,
                confidence=tuning.confidence,
                seed=self.study.seed,
            )
            worth = (verdict.gain_rel or 0.0) >= tuning.min_effect_rel
            underpowered = not verdict.promote and worth and (verdict.gain_low_rel or 0.0) <= 0.0
            if not underpowered:
                break
            log.info("validate.more_repeats", trial=trial, reason=verdict.reason)
        return Validated(
            trial=trial, incumbent=inc, challenger=chal, judgement=verdict, device_s=spent
        )

    def promote(self, trial: int, config: EngineConfig, validated: Validated) -> Promoted:
        repeats = validated.challenger
        assert repeats is not None  # a promoted validation measured the challenger
        diagnosis, pruning = self.findings(config, repeats)
        return Promoted(
            trial=trial,
            config=config,
            objective=rules(self.study.objective).value(repeats) or 0.0,
            repeats=repeats,
            diagnosis=diagnosis,
            pruning=pruning,
        )
