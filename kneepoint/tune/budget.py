"""What the budget left says about the search: what a trial costs out of it (which prices each
move's expected gain, ``kneepoint.policies.search.worth``) and when the search has stopped
paying (trials in a row without a promotion).

Both read the run's state as of its current incumbent's space (its baseline or last
promotion), so a proposer rebuilt on resume prices moves as the live one did. The deadline is
wall-clock time and is left out of the price: a resumed run would see another clock.
"""

from __future__ import annotations

import math
from typing import Literal

from kneepoint.load import rules
from kneepoint.policies.search import single_knob_errors, spread_log
from kneepoint.records import Finished, StudySpec, TrialPrice
from kneepoint.run import RunState

Step = Literal["screen", "validation"]


def floor_rel(state: RunState, study: StudySpec) -> float:
    """The least gain that counts: the incumbent's measured noise or the least effect worth
    promoting, whichever is larger."""
    assert state.incumbent_repeats is not None
    noise = rules(study.objective).noise_rel(state.incumbent_repeats)
    return max(study.tuning.min_effect_rel, noise)


def own_errors(state: RunState) -> list[float]:
    """The run's prediction errors, log(measured / predicted), of the single-knob moves
    proposed before the current space began (the prediction as made, before re-pricing):
    what a proposer rebuilt within the space (a pool's round, a resume) knows as the live
    one did."""
    moves = state.measured_moves(before=state.space_first_trial)
    return [math.log(factor) for _, factor in single_knob_errors(moves)]


def cost_share(state: RunState, study: StudySpec) -> float:
    """One trial's share of the budget left when the current space began: device time (a
    trial's mean so far, else the baseline's) over device-hours left, or one over the trials
    left, whichever is larger; 0 with neither budget set."""
    spent_s, trials, trial_s = state.space_started
    budget, shares = study.budget, [0.0]
    if budget.max_trials is not None:
        shares.append(1.0 / max(1, budget.max_trials - trials))
    if budget.max_device_hours is not None:
        baseline_s = state.baseline.device_s if state.baseline is not None else 0.0
        per_trial = trial_s / trials if trials else baseline_s
        left_s = budget.max_device_hours * 3600.0 - spent_s
        shares.append(1.0 if left_s <= per_trial else per_trial / left_s)
    return min(1.0, max(shares))


def trial_price(state: RunState, study: StudySpec) -> TrialPrice | None:
    """The price of a trial for the current space (None under ``tuning.stop: predicted``,
    where a move must be predicted beyond the noise)."""
    if study.tuning.stop != "budget":
        return None
    return TrialPrice(
        floor_rel=floor_rel(state, study),
        spread_log=spread_log(own_errors(state)),
        cost_share=cost_share(state, study),
    )


def diminishing_returns(state: RunState, study: StudySpec) -> Finished | None:
    """A stop when ``tuning.patience`` trials proposed against the current incumbent have
    finished without a promotion (a promoted trial's round siblings were judged against the
    incumbent before it and do not count)."""
    patience, first = study.tuning.patience, state.space_first_trial
    done = [t for n, t in sorted(state.trials.items()) if n >= first and t.next_step() is None]
    if len(done) < patience:
        return None
    best = max((t.measured_ratio() or 0.0 for t in done), default=0.0)
    hours = state.device_s / 3600.0
    left = study.budget.max_device_hours
    budget = f" of {left:g}" if left is not None else ""
    detail = (
        f"{len(done)} trials in a row since the "
        f"{'last promotion' if state.promotions else 'baseline'} promoted nothing (the best "
        f"measured {best:.2f}x the incumbent, inside the {floor_rel(state, study):.1%} floor "
        f"or not shown beyond the noise; tuning.patience {patience}); "
        f"{hours:.2f}{budget} device-hours used"
    )
    return Finished(reason="diminishing_returns", detail=detail)


def long_shots_only(study: StudySpec, state: RunState) -> bool:
    """Whether the search goes on over the long shots (``Pruning.long_shots``): under
    ``tuning.stop: budget``, when the pruning left no candidate but ruled some knobs out by
    their own rules only."""
    pruning = state.pruning
    assert pruning is not None
    return study.tuning.stop == "budget" and not pruning.candidates and bool(pruning.long_shots)


def expected_step_s(state: RunState, study: StudySpec, step: Step) -> float | None:
    """What a screen or a validation is expected to cost in device time: the mean of this
    run's own so far; a first validation, its repeats' pairs of server starts at the screens'
    cost (a validation is ``validate_repeats`` pairs, each two starts and two sweeps: on
    vLLM's CPU build 272-287 s against screens of 43-109 s, benchmarks/README.md's
    peer_autotune.py). None where nothing has been measured to go by."""
    trials = list(state.trials.values())
    screens = [t.screened.device_s for t in trials if t.screened and t.screened.device_s > 0]
    if step == "screen":
        return sum(screens) / len(screens) if screens else None
    done = [t.validated.device_s for t in trials if t.validated and t.validated.device_s > 0]
    if done:
        return sum(done) / len(done)
    if not screens:
        return None
    return 2 * study.tuning.validate_repeats * sum(screens) / len(screens)


def budget_left_s(state: RunState, study: StudySpec) -> float | None:
    """Device seconds the budget has left (None: no device-hour budget)."""
    budget = study.budget.max_device_hours
    return None if budget is None else budget * 3600.0 - state.device_s


def unaffordable(state: RunState, study: StudySpec, step: Step, trial: int) -> Finished | None:
    """A stop where the device-hour budget left does not cover the next step's expected cost
    (``expected_step_s``): a run that started it would end past its budget (a validation
    begun with 86 s left took 272 s and ended a run 24% over, benchmarks/README.md's
    peer_autotune.py)."""
    budget = study.budget.max_device_hours
    cost = expected_step_s(state, study, step)
    if budget is None or cost is None:
        return None
    left_s = budget * 3600.0 - state.device_s
    if cost <= left_s:
        return None
    what = f"trial {trial}'s {step}" if trial else f"another trial's {step}"
    spent_h, left = state.device_s / 3600.0, max(0.0, left_s)
    detail = (
        f"{spent_h:.2f} of {budget:g} device-hours spent: the {left:.0f} s left do not cover "
        f"{what} (~{cost:.0f} s, as this run's have cost)"
    )
    return Finished(reason="max_device_hours", detail=detail)
