"""A tuning run's state, rebuilt from its ledger: the incumbent, what binds, the trials so far,
the device time spent, and where the loop stands.

The state is a pure function of the ledger's events, which is what makes resuming exact: the
loop's decisions (``kneepoint.tune.decide``) read it and nothing else. Several trials may be open
at once (a round of workers screens one per GPU); a promotion closes the finalists of its round
that were waiting for validation, superseded. ``apply`` refuses an event that cannot follow the
ones before it, so a damaged or hand-edited ledger is named, never half-read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kneepoint.load import rules
from kneepoint.records import (
    Baseline,
    BurstChecked,
    Diagnosis,
    EngineConfig,
    Event,
    Finished,
    KneepointError,
    Objective,
    Outcome,
    Promoted,
    Proposal,
    Proposed,
    Pruning,
    QualityChecked,
    RunStarted,
    Screened,
    SloCapacity,
    SweepResult,
    Validated,
)
from kneepoint.run.trial_state import Step, TrialState

_STEP_OF: dict[type, Step] = {
    Screened: "screen",
    QualityChecked: "quality",
    Validated: "validate",
    Promoted: "promote",
}


class StateError(KneepointError, ValueError):
    """An event that cannot follow the ones before it (a damaged or hand-edited ledger)."""


@dataclass
class RunState:
    started: RunStarted | None = None
    baseline: Baseline | None = None
    incumbent: EngineConfig | None = None
    incumbent_objective: float | None = None
    incumbent_repeats: SweepResult | None = None
    diagnosis: Diagnosis | None = None
    pruning: Pruning | None = None
    promotions: list[Promoted] = field(default_factory=list)
    trials: dict[int, TrialState] = field(default_factory=dict)
    device_s: float = 0.0
    trial_device_s: float = 0.0
    """Device seconds the trials' own steps spent (screens, quality checks, validations)."""
    space_started: tuple[float, int, float] = (0.0, 0, 0.0)
    """(device_s, trials_run, trial_device_s) when the current incumbent's space began (its
    baseline or promotion): what a proposer built for that space is priced from, live or
    resumed alike."""
    space_first_trial: int = 1
    """The first trial proposed against the current incumbent (its round's siblings, judged
    against the one before, come before it)."""
    finished: Finished | None = None
    burst: BurstChecked | None = None
    objective: Objective = field(default_factory=SloCapacity)
    """What the run maximises: how its sweeps' values are read."""

    @classmethod
    def replay(cls, events: Iterable[Event], objective: Objective | None = None) -> RunState:
        state = cls(objective=objective or SloCapacity())
        for event in events:
            state.apply(event)
        return state

    def apply(self, event: Event) -> None:
        self._check_follows(event)
        if isinstance(event, RunStarted):
            self.started = event
        elif isinstance(event, Baseline):
            self.baseline = event
            self._set_incumbent(event.config, event.repeats, event.diagnosis, event.pruning)
        elif isinstance(event, Proposed):
            self.trials[event.trial] = TrialState(
                event.trial,
                event.proposal,
                event.quality_check,
                self.incumbent_objective,
                objective=self.objective,
            )
        elif isinstance(event, Screened | QualityChecked | Validated | Promoted):
            self._apply_trial_event(event)
        elif isinstance(event, Finished):
            self.finished = event
        elif isinstance(event, BurstChecked):
            self.burst = event
        spent = getattr(event, "device_s", 0.0)
        self.device_s += spent
        if isinstance(event, Screened | QualityChecked | Validated):
            self.trial_device_s += spent
        if isinstance(event, Baseline | Promoted):
            self.space_started = (self.device_s, self.trials_run, self.trial_device_s)
            self.space_first_trial = self.next_trial_number()

    def _check_follows(self, event: Event) -> None:
        problem = self._why_not(event)
        if problem is not None:
            raise StateError(f"a {event.event} event where {problem}")

    def _why_not(self, event: Event) -> str | None:
        """Why the event cannot come next; None: it can."""
        if isinstance(event, RunStarted):
            return None if self.started is None else "the run had started already"
        if self.started is None:
            return "the run had not started"
        if isinstance(event, BurstChecked):
            return None if self.burst_due else "no burst check was due"
        if self.finished is not None:
            return "the run had finished"
        return self._why_not_search(event)

    def _why_not_search(self, event: Event) -> str | None:
        if isinstance(event, Baseline):
            return None if self.baseline is None else "the baseline was measured already"
        if isinstance(event, Finished):
            still = self.open_trials()
            return None if not still else f"trial {still[0].trial} was still open"
        if self.baseline is None:
            return "the baseline was not measured yet"
        if isinstance(event, Proposed):
            expected = self.next_trial_number()
            return None if event.trial == expected else f"trial {expected} was next"
        return self._why_not_trial(event)

    def _why_not_trial(self, event: Event) -> str | None:
        number = getattr(event, "trial", None)
        trial = self.trials.get(number) if isinstance(number, int) else None
        if trial is None:
            return f"no trial {number} was proposed"
        step = trial.next_step()
        if step is None:
            return f"trial {number} had ended"
        if _STEP_OF.get(type(event)) != step:
            return f"trial {number} was at its {step} step"
        return None

    def _apply_trial_event(self, event: Screened | QualityChecked | Validated | Promoted) -> None:
        trial = self.trials[event.trial]
        if isinstance(event, Screened):
            trial.screened = event
        elif isinstance(event, QualityChecked):
            trial.quality = event
        elif isinstance(event, Validated):
            trial.validated = event
        else:
            trial.promoted = event
            self.promotions.append(event)
            self._set_incumbent(event.config, event.repeats, event.diagnosis, event.pruning)
            self._supersede(event.trial)

    def _supersede(self, promoted: int) -> None:
        """Close the finalists still waiting for validation when a sibling of their round
        was promoted: they were screened against an incumbent that is gone, and the walk from
        the new one decides whether they are tried again."""
        for trial in self.open_trials():
            screened = trial.screened
            if trial.trial == promoted or screened is None:
                continue
            reason = (
                f"superseded: {screened.reason}; a sibling of its round was promoted "
                "first, and it was screened against the incumbent before"
            )
            trial.screened = screened.model_copy(update={"finalist": False, "reason": reason})

    def _set_incumbent(
        self, config: EngineConfig, repeats: SweepResult, diagnosis: Diagnosis, pruning: Pruning
    ) -> None:
        self.incumbent, self.incumbent_repeats = config, repeats
        self.incumbent_objective = rules(self.objective).value(repeats)
        self.diagnosis, self.pruning = diagnosis, pruning

    @property
    def incumbent_by_repeat(self) -> tuple[float, ...]:
        """The incumbent's objective over its own repeats (the validation's early look reads
        its known noise from them)."""
        repeats = self.incumbent_repeats
        return () if repeats is None else rules(self.objective).by_repeat(repeats)

    @property
    def incumbent_knee_rps(self) -> float:
        """Where the incumbent's knee lies: its repeats' SLO capacity where they saw it fail,
        else the starting configuration's knee search (goodput at a fixed rate measures that
        rate only). For peak throughput, the highest rate it completed requests at, measured
        past its knee: the rate it serves flat out, which the next sweeps must overrun."""
        repeats = self.incumbent_repeats
        if repeats is not None and self.promotions:
            served = rules(self.objective).served_rps(repeats)
            if served is not None:
                return served
        if repeats is not None and repeats.capacity_rps is not None:
            return repeats.capacity_rps
        knee = self.baseline.knee if self.baseline is not None else None
        if knee is None or not knee.points:
            return 0.0
        return knee.capacity_rps or min(p.rate_rps for p in knee.points)

    def earlier_incumbents(self) -> list[tuple[EngineConfig, SweepResult]]:
        """The incumbents before the current one, in order, each with the repeats that
        measured it while it held: the baseline's, then each promoted configuration but the
        last."""
        walk = [] if self.baseline is None else [(self.baseline.config, self.baseline.repeats)]
        walk += [(p.config, p.repeats) for p in self.promotions]
        return walk[: len(self.promotions)]

    def open_trials(self) -> list[TrialState]:
        """The trials with a step left, by number."""
        return [self.trials[n] for n in sorted(self.trials) if self.trials[n].next_step()]

    def history(self) -> list[tuple[Proposal, Outcome]]:
        """Every finished trial's proposal and outcome, in order (what proposers replay)."""
        done = []
        for number in sorted(self.trials):
            trial = self.trials[number]
            outcome = trial.outcome()
            if outcome is not None and trial.next_step() is None:
                done.append((trial.proposal, outcome))
        return done

    def measured_moves(self, before: int | None = None) -> list[tuple[Proposal, float]]:
        """Every trial's proposal (numbered below ``before``, if given) with its measured
        ratio to the incumbent it was judged against, in order, across promotions (what
        ``learned_factors`` reads)."""
        return [
            (self.trials[n].proposal, r)
            for n in sorted(self.trials)
            if (before is None or n < before) and (r := self.trials[n].measured_ratio()) is not None
        ]

    def outrun_gain(self, proposal: Proposal) -> float | None:
        """The gain repeated pairs showed for the same move (the same knobs to the same values)
        from an earlier incumbent, where the move won its validation but a sibling of its round
        won by more and was promoted instead (several GPUs validate a round's finalists side by
        side): its screen from the new incumbent has then only to confirm it
        (``kneepoint.policies.judge.promotion.is_finalist``)."""
        for number in sorted(self.trials):
            trial = self.trials[number]
            validated = trial.validated
            if validated is None or validated.judgement is None or not validated.promote:
                continue
            outrun = trial.promoted is None and trial.next_step() is None
            if outrun and trial.proposal.changes == proposal.changes:
                return validated.judgement.gain_rel
        return None

    def screen_pairs(self) -> list[tuple[float, float]]:
        """(screen, validated objective) of each configuration measured both ways: the
        starting configuration's knee search against its repeats, and each validated trial's
        screen against its challenger arm (``kneepoint.policies.judge.yardstick``)."""
        rule = rules(self.objective)
        pairs: list[tuple[float | None, float | None]] = []
        if self.baseline is not None:
            pairs.append((rule.value(self.baseline.knee), rule.value(self.baseline.repeats)))
        for n in sorted(self.trials):
            trial = self.trials[n]
            challenger = trial.validated.challenger if trial.validated is not None else None
            if trial.screened is not None and challenger is not None:
                pairs.append((trial.screened.outcome.objective, rule.value(challenger)))
        return [(s, v) for s, v in pairs if s is not None and v is not None]

    @property
    def burst_due(self) -> bool:
        """The winner's burst check is owed: the search stopped in a way a check follows
        (``Finished.burst_follows``) and none is recorded."""
        return self.finished is not None and self.finished.burst_follows and self.burst is None

    @property
    def trials_run(self) -> int:
        """Trials that spent their screening (what max_trials counts)."""
        return sum(t.screened is not None for t in self.trials.values())

    def next_trial_number(self) -> int:
        return max(self.trials, default=0) + 1
