"""What a run on several GPU sets does next, with no barrier: a pure function of the run's
state (rebuilt from the ledger), the steps out on GPUs and how many server slots are free.

``kneepoint tune`` on one GPU takes ``next_action``'s one step at a time. A pool of slots (each
slot a server's GPUs, ``kneepoint.tune.pool_loop``) gives each slot that frees the next
worthwhile step at once: the baseline's knee search, then its repeats one a slot; a promotion
as soon as a winner is validated and no validation beside it can still beat it; a finalist's
quality check and validation repeats (each repeat's pair, incumbent and challenger, on one
slot), best screened first; and with what is left, screens of new proposals against the
incumbent now. A screen that lands after a promotion beside it is read as superseded
(``RunState``). Nothing here measures or writes; the driver carries the actions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kneepoint.policies.judge import (
    ended_by_budget,
    judged,
    measured_repeats,
    next_repeats,
    outrun,
)
from kneepoint.records import (
    CheckBurst,
    CheckQuality,
    Event,
    JoinBaseline,
    MeasureRepeats,
    Promote,
    Screen,
    SearchKnee,
    StudySpec,
    Validate,
    Validated,
    ValidationPart,
)
from kneepoint.run import RunState, TrialState
from kneepoint.tune.budget import budget_left_s, unaffordable
from kneepoint.tune.decide import Done, Propose, Start, Stop, search_stop
from kneepoint.tune.steps import repeats_wanted

GpuStep = SearchKnee | MeasureRepeats | Screen | CheckQuality | Validate | CheckBurst
"""A step that runs on a slot's GPUs."""


@dataclass(frozen=True)
class Write:
    """Record an event the state already implies (a validation judged on its parts)."""

    event: Event


Dispatched = Start | Stop | Propose | Done | JoinBaseline | Promote | Write | GpuStep
"""What the driver does: its own steps, then each ``GpuStep`` on a free slot."""


@dataclass(frozen=True)
class Pooled:
    """The pool as the driver sees it."""

    out: tuple[GpuStep, ...] = ()
    """Steps measuring now."""
    free: int = 1
    """Servers that could start now (free GPUs over the incumbent's)."""
    dry: bool = False
    """The proposer had nothing new against this state: slots nothing else would use go to
    the next phase of validations under way."""


def dispatch(state: RunState, study: StudySpec, now: datetime, pooled: Pooled) -> list[Dispatched]:
    """The next things to do with the pool's free slots; [] waits for a step to land."""
    out, free = pooled.out, pooled.free
    if state.started is None:
        return [Start()]
    if state.finished is not None:
        if out:
            return []
        due = state.burst_due and free > 0
        return [CheckBurst()] if due else ([] if state.burst_due else [Done()])
    if state.baseline is None:
        return _baseline(state, study, out, free)
    return _search(state, study, now, pooled)


def _baseline(
    state: RunState, study: StudySpec, out: Sequence[GpuStep], free: int
) -> list[Dispatched]:
    """The knee search; then its repeats, one a slot; then the Baseline made of them."""
    knee = next((p for p in state.baseline_parts if p.repeats == 0), None)
    if knee is None:
        return [SearchKnee()] if free > 0 and not out else []
    if not repeats_wanted(study, knee):
        return [] if out else [JoinBaseline()]
    covered = {
        p.first_repeat + i for p in state.baseline_parts if p.repeats for i in range(p.repeats)
    }
    busy = {s.repeats[0] for s in out if isinstance(s, MeasureRepeats)}
    wanted = [r for r in range(study.tuning.validate_repeats) if r not in covered | busy]
    if not wanted and not out:
        return [JoinBaseline()]
    return [MeasureRepeats(repeats=(r, 1)) for r in wanted[:free]]


def _search(state: RunState, study: StudySpec, now: datetime, pooled: Pooled) -> list[Dispatched]:
    out, free = pooled.out, pooled.free
    trials = ranked(state.open_trials())
    winner = next((t for t in trials if t.next_step() == "promote"), None)
    if winner is not None:
        return _promotion(state, study, winner, out, free)
    steps: list[Dispatched] = []
    for trial in trials:
        mine = _trial_steps(state, study, trial, out, free - _slots(steps))
        now_due: list[Dispatched] = [s for s in mine if isinstance(s, Write | Stop)]
        if now_due:
            return now_due if not isinstance(now_due[0], Stop) or not out else steps
        steps += mine
    left = free - _slots(steps)
    if left <= 0:
        return steps
    stop = search_stop(state, study, now)
    if stop is not None and not (steps or out or trials):
        return [Stop(stop)]
    cap = study.budget.max_trials
    n = 0 if stop is not None or pooled.dry else left
    n = n if cap is None else min(n, cap - len(state.trials))
    if n > 0:
        return [*steps, Propose(n)]
    held_back = _may_need(study, out)
    for trial in trials:  # nothing new to screen: the next phase of validations under way
        left = free - _slots(steps) - held_back
        if left <= 0:
            break
        steps += _trial_steps(state, study, trial, (*out, *_gpu(steps)), left, speculate=True)
    return steps


def _may_need(study: StudySpec, out: Sequence[GpuStep]) -> int:
    """Slots kept from a validation's next phase measured in case: a first phase for each
    screen or quality check out, whose trial may land a finalist (one that waits on phases in
    case would wait on the critical path)."""
    return study.tuning.validate_repeats * sum(isinstance(s, Screen | CheckQuality) for s in out)


def _gpu(steps: Sequence[Dispatched]) -> list[GpuStep]:
    return [s for s in steps if isinstance(s, GpuStep)]


def _promotion(
    state: RunState,
    study: StudySpec,
    winner: TrialState,
    out: Sequence[GpuStep],
    free: int,
) -> list[Dispatched]:
    """The validated winner's promotion once no quality check or validation beside it is out
    and none begun can still beat it: those that cannot are closed first, with their verdict
    (``outrun``), so their repeats stay in the run's device time; those that can take their
    next steps first. Screens out land superseded."""
    begun = [
        t
        for t in ranked(state.open_trials())
        if t.trial != winner.trial
        and t.next_step() in ("quality", "validate")
        and (t.quality is not None or t.trial in state.validation_parts or _is_out(t, out))
    ]
    if any(_is_out(t, out) and not isinstance(_out_of(t, out), Screen) for t in begun):
        steps: list[Dispatched] = []
        for t in begun:
            steps += _trial_steps(state, study, t, out, free - _slots(steps))
        return [s for s in steps if not isinstance(s, Stop)]
    known = state.incumbent_by_repeat
    for t in begun:
        parts = state.validation_parts.get(t.trial, [])
        closed = outrun(study, t.trial, parts, winner.validated, known)
        if closed is not None:
            return [Write(closed)]
        steps = _trial_steps(state, study, t, out, free)
        if steps:
            return steps
    return [Promote(trial=winner.trial)]


def _trial_steps(
    state: RunState,
    study: StudySpec,
    trial: TrialState,
    out: Sequence[GpuStep],
    free: int,
    *,
    speculate: bool = False,
) -> list[Dispatched]:
    """An open trial's next steps not yet out; with ``speculate`` (slots nothing else would
    use), its validation's next phase too, judged only if the phase before cannot tell."""
    step, n = trial.next_step(), trial.trial
    if step == "screen":
        return [Screen(trial=n)] if free > 0 and not _is_out(trial, out) else []
    if step == "quality":
        return [CheckQuality(trial=n)] if free > 0 and not _is_out(trial, out) else []
    if step != "validate":
        return []
    parts = state.validation_parts.get(n, [])
    busy = {s.repeats[0] for s in out if isinstance(s, Validate) and s.trial == n and s.repeats}
    done = {p.first_repeat + i for p in parts for i in range(p.repeats)}
    validated = _judged_phase(state, study, n, done, busy)
    if validated is not None:
        return [Write(validated)]
    if not busy and (over := _over_budget(state, study, n, parts)) is not None:
        return [over]
    phase = next_repeats(study, measured_repeats(parts), max(1, free + len(busy)))
    wanted = [r for r in phase if r not in done | busy]
    last = study.tuning.validate_repeats
    if speculate and phase.stop == last and len(wanted) < free:
        wanted += [r for r in next_repeats(study, last) if r not in done | busy]
    return [Validate(trial=n, repeats=(r, 1)) for r in wanted[:free]]


def _over_budget(
    state: RunState, study: StudySpec, trial: int, parts: Sequence[ValidationPart]
) -> Stop | Write | None:
    """A validation the budget left cannot pay for: not begun (the run stops), or ended
    where its next phase would run past the budget (``ended_by_budget``; its parts' device
    time is not in the run's until its verdict is written)."""
    if not parts:
        over = unaffordable(state, study, "validation", trial)
        return None if over is None else Stop(over)
    left_s = budget_left_s(state, study)
    ended = ended_by_budget(study, trial, parts, state.incumbent_by_repeat, left_s)
    return None if ended is None else Write(ended)


def _judged_phase(
    state: RunState, study: StudySpec, trial: int, done: set[int], busy: set[int]
) -> Validated | None:
    """The validation judged on its first complete phase that decides: the early look's
    pair where it was measured alone, the first ``validate_repeats``, as many again."""
    parts = state.validation_parts.get(trial, [])
    n = study.tuning.validate_repeats
    for end in (1, n, 2 * n):
        complete = set(range(end)) <= done and not any(r < end for r in busy)
        alone = end > 1 or (done | busy) == {0}
        if not complete:
            return None
        if alone:
            shares = [p for p in parts if p.first_repeat < end]
            validated = judged(study, trial, shares, state.incumbent_by_repeat)
            if validated is not None:
                return validated
    return None


def ranked(trials: list[TrialState]) -> list[TrialState]:
    """Best measured first (the order ``kneepoint tune`` takes finalists in)."""
    return sorted(trials, key=lambda t: (-(t.measured_objective() or 0.0), t.trial))


def _is_out(trial: TrialState, out: Sequence[GpuStep]) -> bool:
    return any(s.trial == trial.trial for s in out)


def _out_of(trial: TrialState, out: Sequence[GpuStep]) -> GpuStep | None:
    return next((s for s in out if s.trial == trial.trial), None)


def _slots(steps: Sequence[Dispatched]) -> int:
    """Slots the dispatched steps take."""
    return sum(isinstance(s, GpuStep) for s in steps)
