"""Carrying out a run's actions (``kneepoint.tune.decide``): what each one records. The
measuring ones (the baseline, a trial's screen, quality check, validation or part of one, and
promotion, the winner's burst check) run the study's steps on a GPU, but a screen the memory
model says vLLM would refuse (``preflight``) starts nothing; a round's proposals become its
trials.
``kneepoint tune`` on one GPU records each event as it comes; a pool's step returns its
events to the driver (``kneepoint.tune.gpu_step``). One executor for both: a step exists once.
"""

from __future__ import annotations

from typing import assert_never

from kneepoint.load import rules
from kneepoint.measure import Progress, TrialFailedError
from kneepoint.physics import UnmodeledSettingError, plan_memory, resolve_engine
from kneepoint.policies.judge import screen_bias
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Event,
    Finished,
    KnobCatalogue,
    Outcome,
    Promote,
    Proposal,
    Proposed,
    Screen,
    Screened,
    StopRule,
    StudySpec,
    SweepResult,
    TrialStep,
    Validate,
    ValidationPart,
)
from kneepoint.run import RunState
from kneepoint.tune.budget import budget_left_s
from kneepoint.tune.burst_step import check_burst
from kneepoint.tune.decide import MeasureBaseline
from kneepoint.tune.standing import baseline_words
from kneepoint.tune.steps import Steps

Measure = MeasureBaseline | TrialStep | CheckBurst
"""The actions that run on a GPU."""


def proposed(
    proposals: list[Proposal], state: RunState, catalogue: KnobCatalogue, stop: StopRule
) -> list[Proposed] | Finished:
    """A round's proposals as its trials, numbered on from the run's; none: the search is
    exhausted (the long shots too under ``tuning.stop: budget``). A trial that changes a knob
    which alters model outputs is quality-checked."""
    if not proposals:
        return Finished(reason="exhausted", detail=_exhausted_words(state, stop))
    first = state.next_trial_number()
    return [
        Proposed(trial=first + i, proposal=p, quality_check=_changes_outputs(p, catalogue))
        for i, p in enumerate(proposals)
    ]


def _exhausted_words(state: RunState, stop: StopRule) -> str:
    """What was tried: the candidates, and under the budget stop the long shots."""
    pruning = state.pruning
    if pruning is None or stop != "budget" or not pruning.long_shots:
        return "every candidate has been tried"
    names = ", ".join(c.knob.name for c in pruning.long_shots)
    spent = "every candidate and" if pruning.candidates else "no candidate was left, and"
    return (
        f"{spent} every long shot has been tried (each ruled-out knob moved one step each "
        f"way: {names})"
    )


def _changes_outputs(proposal: Proposal, catalogue: KnobCatalogue) -> bool:
    knobs = [catalogue.get(name) for name in proposal.changes]
    return any(knob is not None and knob.changes_outputs for knob in knobs)


class Executor:
    """Measures one action against the run's state; returns its event."""

    def __init__(self, study: StudySpec, steps: Steps, progress: Progress) -> None:
        self.study, self.steps, self.progress = study, steps, progress

    def event(self, action: Measure, state: RunState) -> Event:
        match action:
            case MeasureBaseline():
                return self._baseline()
            case CheckBurst():
                return self._burst(state)
            case Screen() | CheckQuality() | Validate() | Promote():
                return self._trial_step(action, state)
            case _:
                assert_never(action)

    def _baseline(self) -> Event:
        try:
            baseline = self.steps.baseline()
        except TrialFailedError as exc:
            return Finished(reason="baseline_failed", detail=str(exc))
        self.progress.outcome(baseline_words(baseline, self.study))
        return baseline

    def _burst(self, state: RunState) -> Event:
        assert state.incumbent is not None and state.incumbent_repeats is not None
        assert state.finished is not None
        self.progress.phase("burst", "the winner: a burst past its operating rate, then back")
        checked = check_burst(
            self.steps.bench,
            self.steps.folder.path / "burst",
            state.incumbent,
            state.incumbent_repeats,
            state.finished,
        )
        self.progress.outcome(checked.summary())
        return checked

    def _trial_step(self, action: TrialStep, state: RunState) -> Event:
        """The event of one step of a trial: screen, quality check, validation, promotion."""
        steps, trial, progress = self.steps, state.trials[action.trial], self.progress
        n, proposal = trial.trial, trial.proposal
        assert state.incumbent is not None and state.incumbent_repeats is not None
        incumbent, repeats = state.incumbent, state.incumbent_repeats
        knee = state.incumbent_knee_rps
        match action:
            case Screen():
                progress.phase("screen", f"trial {n}: {reason_once(state, n)}")
                bias = screen_bias(screen_pairs(state))
                refused = preflight(self.study, n, proposal)
                shown = outrun_gain(state, proposal)
                return refused or steps.screen(
                    n, proposal, knee, repeats, bias, validated_gain=shown
                )
            case CheckQuality():
                progress.phase("quality", f"trial {n}: greedy outputs vs the incumbent")
                return steps.quality(n, incumbent, proposal.config)
            case Validate():
                assert trial.screened is not None
                assert action.repeats is None, "a share of a validation is a part of it"
                progress.phase("validate", f"trial {n}: interleaved with the incumbent")
                return steps.validate(
                    n,
                    (incumbent, knee),
                    trial.screened,
                    proposal.config,
                    incumbent_points=repeats.points,
                    known=state.incumbent_by_repeat,
                    left_s=budget_left_s(state, self.study),
                )
            case Promote():
                assert trial.validated is not None
                probe = state.baseline.acceptance if state.baseline is not None else None
                promoted = steps.promote(n, proposal.config, trial.validated, probe)
                progress.status(
                    f"promoted trial {n}: {promoted.objective:.2f} "
                    f"{rules(self.study.objective).unit()}; "
                    f"now {promoted.diagnosis.headline()}"
                )
                return promoted
            case _:
                assert_never(action)

    def validation_part(
        self, action: Validate, state: RunState, earlier: list[ValidationPart]
    ) -> ValidationPart:
        """Some of a finalist's validation repeats (a pool slot's share of them, ``action``'s
        repeats; ``earlier``: its parts measured before)."""
        assert state.incumbent is not None and state.incumbent_repeats is not None
        assert action.repeats is not None
        n, (first, count) = action.trial, action.repeats
        trial, repeats = state.trials[n], range(first, first + count)
        assert trial.screened is not None
        last = repeats.stop - 1
        self.progress.phase(
            "validate", f"trial {n}: repeats {repeats.start}-{last} interleaved with the incumbent"
        )
        return self.steps.validate_part(
            n,
            (state.incumbent, state.incumbent_knee_rps),
            trial.screened,
            trial.proposal.config,
            incumbent_points=state.incumbent_repeats.points,
            repeats=repeats,
            earlier=earlier,
        )


def reason_once(state: RunState, n: int) -> str:
    """Trial ``n``'s reason, its candidate's rationale said in full once a run: a later step
    of the same candidate points back to the trial that said it, so a walk's steps on one knob
    do not each repeat it. The report's trials table keeps all."""
    proposal = state.trials[n].proposal
    moved, _, why = proposal.prediction.reason.partition(": ")
    if not why or not proposal.reason.startswith(proposal.prediction.reason):
        return proposal.reason
    later = proposal.reason[len(proposal.prediction.reason) :]
    for m in sorted(state.trials):
        earlier = state.trials[m].proposal.prediction.reason
        if m < n and earlier.partition(": ")[2] == why:
            return f"{moved}: as trial {m}{later}"
    return proposal.reason


def preflight(study: StudySpec, trial: int, proposal: Proposal) -> Screened | None:
    """vLLM's refusal of ``proposal`` as the memory model words it (None: it would start, or
    the backend's GPU entry does not describe its device)."""
    if not study.backend.checks_memory:
        return None
    try:
        engine = resolve_engine(proposal.config, study.gpu, study.model)
    except UnmodeledSettingError as exc:
        refusal = f"not modelled: {exc}"
    else:
        plan = plan_memory(study.gpu, study.model, engine)
        if plan.refusal is None:
            return None
        refusal = plan.refusal.message
    outcome = Outcome(status="startup_failed", detail=f"preflight: {refusal}")
    return Screened(trial=trial, outcome=outcome, reason=f"preflight refused: {refusal}")


def screen_pairs(state: RunState) -> list[tuple[float, float]]:
    """(screen, validated objective) of each configuration measured both ways: the
    starting configuration's knee search against its repeats, and each validated trial's
    screen against its challenger arm (``kneepoint.policies.judge.yardstick``). A knee
    search whose capacity is only a floor (no rate it tried failed) gives no pair: it says
    where its bracket ended, not where the configuration reads."""
    rule = rules(state.objective)

    def read(screen: SweepResult) -> float | None:
        return None if rule.screens_knee and screen.floor_reason else rule.value(screen)

    pairs: list[tuple[float | None, float | None]] = []
    if state.baseline is not None:
        pairs.append((read(state.baseline.knee), rule.value(state.baseline.repeats)))
    for n in sorted(state.trials):
        trial = state.trials[n]
        challenger = trial.validated.challenger if trial.validated is not None else None
        screen = trial.screened.sweep if trial.screened is not None else None
        if screen is not None and challenger is not None:
            pairs.append((read(screen), rule.value(challenger)))
    return [(s, v) for s, v in pairs if s is not None and v is not None]


def outrun_gain(state: RunState, proposal: Proposal) -> float | None:
    """The gain repeated pairs showed for the same move (the same knobs to the same values)
    from an earlier incumbent, where the move won its validation but a sibling of its round
    won by more and was promoted instead (several GPUs validate a round's finalists side by
    side): its screen from the new incumbent has then only to confirm it
    (``kneepoint.policies.judge.promotion.is_finalist``)."""
    for number in sorted(state.trials):
        trial = state.trials[number]
        validated = trial.validated
        if validated is None or validated.judgement is None or not validated.promote:
            continue
        outrun = trial.promoted is None and trial.next_step() is None
        if outrun and trial.proposal.changes == proposal.changes:
            return validated.judgement.gain_rel
    return None
