"""Every proposer the loop can use, by the name a study gives (``tuning.proposer``), built over
one search space: coordinate descent (then the combination of the moves it measured alone),
Optuna over the pruned space, or ``auto`` (coordinate descent and its combination first, then
Optuna once they are done); under ``tuning.stop: budget``, then the long shots, then the
combination of every move measured alone, candidates and long shots together. ``kneepoint
tune`` asks it for one configuration at a time, a pool's driver for a round
(``Proposer.batch``); both build it here, from the run's state."""

from __future__ import annotations

from collections.abc import Callable

from kneepoint.load import rules
from kneepoint.policies.diagnosis import context_of, observe_study
from kneepoint.policies.search import (
    PRIOR_SPREAD_LOG,
    Combination,
    CoordinateDescent,
    Known,
    LongShots,
    OptunaProposer,
    Phased,
    Proposer,
    ShortOfRate,
    StepOns,
    ThenLongShots,
    learned_factors,
    replay,
    search_space,
)
from kneepoint.records import (
    EngineConfig,
    Outcome,
    Proposal,
    Pruning,
    SearchSpace,
    StudySpec,
    SweepResult,
)
from kneepoint.run import RunState, TrialState, open_storage
from kneepoint.tune.budget import long_shots_only, trial_price

Factory = Callable[[StudySpec, SearchSpace, str | None, str], Proposer]
"""(study, space, Optuna storage URL, Optuna study name) -> a proposer. The storage is opened
here, by the agent (``kneepoint.run.optuna_storage``), never by the policy; None keeps the
study in memory (a pool's round, rebuilt from the run's history each time)."""


def _coordinate(study: StudySpec, space: SearchSpace, _url: str | None, _name: str) -> Proposer:
    """The walk, then the combination of the moves it measured alone."""
    gain = study.tuning.min_effect_rel
    walk = CoordinateDescent(space, study.seed, min_gain=gain)
    return Phased(walk, lambda: Combination(space, study.seed, min_gain=gain))


def _optuna(study: StudySpec, space: SearchSpace, url: str | None, name: str) -> Proposer:
    storage = None if url is None else open_storage(url)
    return OptunaProposer(
        space, study.seed, sampler=study.tuning.sampler, storage=storage, study_name=name
    )


def _auto(study: StudySpec, space: SearchSpace, url: str | None, name: str) -> Proposer:
    """The walk and its combination, then Optuna where the pruned space has knobs that can
    interact: over one knob the walk already stepped and halved it, and Optuna's draws only
    repeat it, spending the trials the long shots would have had."""
    walk = _coordinate(study, space, url, name)
    if len(space.candidates) < 2:
        return walk
    return Phased(walk, lambda: _optuna(study, space, url, name))


def short_of_rate(rate_rps: float | None, knee_rps: float, spread_log: float) -> ShortOfRate | None:
    """The fixed rate the incumbent's knee falls short of, if any (a promoted incumbent that
    missed the rate is known by the starting configuration's knee: an underestimate)."""
    if rate_rps is None or not 0.0 < knee_rps < rate_rps:
        return None
    return ShortOfRate(rate_rps=rate_rps, knee_rps=knee_rps, spread_log=spread_log)


PROPOSERS: dict[str, Factory] = {"coordinate": _coordinate, "optuna": _optuna, "auto": _auto}


def run_proposer(study: StudySpec, state: RunState, url: str | None) -> Proposer:
    """The study's proposer over the incumbent's pruned space, told the run's history (each
    knob's prediction re-priced by what its moves measured so far); under ``tuning.stop:
    budget``, the long shots once that space is spent (or when it is empty)."""
    assert state.incumbent is not None and state.pruning is not None
    assert state.incumbent_repeats is not None
    observation = observe_study(study, state.incumbent, state.incumbent_repeats)
    objective, price = rules(study.objective), trial_price(state, study)
    spread = PRIOR_SPREAD_LOG if price is None else price.spread_log
    short_of = short_of_rate(objective.fixed_rate_rps, state.incumbent_knee_rps, spread)

    def space(pruning: Pruning) -> SearchSpace:
        return search_space(
            pruning,
            context_of(observation),
            state.incumbent_objective,
            learned=learned_factors(state.measured_moves()),
            price=price,
            most_gain=objective.most_gain(state.incumbent_objective),
            short_of=short_of,
        )

    pruning = state.pruning

    earlier = [c for c, _ in earlier_incumbents(state)]

    def shots() -> SearchSpace:
        return space(pruning.model_copy(update={"candidates": pruning.long_shots}))

    def long_shots() -> LongShots:
        return LongShots(shots(), earlier)

    def whole() -> SearchSpace:
        knobs = (*pruning.candidates, *pruning.long_shots)
        return space(pruning.model_copy(update={"candidates": knobs}))

    def step_ons() -> StepOns:
        return StepOns(whole(), earlier, min_gain=study.tuning.min_effect_rel)

    def every_move() -> Combination:
        return Combination(whole(), study.seed, min_gain=study.tuning.min_effect_rel)

    def sampled() -> Proposer:
        name = f"{study.name}-space{len(state.promotions)}-whole"
        return _optuna(study, whole(), url, name)

    proposer: Proposer
    if long_shots_only(study, state):
        proposer = long_shots()
    else:
        name = f"{study.name}-space{len(state.promotions)}"
        proposer = PROPOSERS[study.tuning.proposer](study, space(pruning), url, name)
        if study.tuning.stop == "budget" and pruning.long_shots:
            proposer = ThenLongShots(proposer, long_shots())
    if study.tuning.stop == "budget" and pruning.long_shots:
        # Long shots measured alone combine as the walk's moves do (``Combination``): an
        # optimum can hold two long shots each flat alone. Then the one-knob moves that
        # measured no loss, the walk's and the long shots', step on (``StepOns``). Then, with
        # budget left, the sampler over every knob, candidates and long shots, so the patience
        # or the budget ends the run, not `exhausted` with budget unspent
        # (benchmarks/regret.py's studies).
        interacting = len(pruning.candidates) + len(pruning.long_shots) >= 2
        proposer = Phased(
            Phased(Phased(proposer, every_move), step_ons), sampled if interacting else None
        )
    return replay(Known(proposer, left_behind(state)), history(state))


def left_behind(state: RunState) -> dict[str, Outcome]:
    """Each earlier incumbent's configuration (by fingerprint) with its objective as its
    repeats measured it while it was the incumbent (what ``Known`` answers from)."""
    rule = rules(state.objective)
    left: dict[str, Outcome] = {}
    for config, repeats in earlier_incumbents(state):
        objective = rule.value(repeats)
        if objective is not None:
            detail = "an incumbent earlier in this run, measured then and left"
            left[config.fingerprint()] = Outcome(
                status="ok", objective=objective, feasible=objective > 0, detail=detail
            )
    return left


def history(state: RunState) -> list[tuple[Proposal, Outcome]]:
    """Every finished trial's proposal and outcome, in order (what proposers replay)."""
    done = []
    for number in sorted(state.trials):
        trial = state.trials[number]
        outcome = told(trial)
        if outcome is not None and trial.next_step() is None:
            done.append((trial.proposal, outcome))
    return done


def told(trial: TrialState) -> Outcome | None:
    """What the proposers are told. A validated trial reports its validated objective, but
    one the judge did not promote is told as no better than the incumbent it was judged
    against: its gain did not reach the least effect worth promoting, and no prediction may
    be re-priced by it as a gain. Where that gain was real (its interval above zero) the
    outcome says so, and the walk steps on past it (``gain_shown``)."""
    if trial.screened is None:
        return None
    outcome, validated = trial.screened.outcome, trial.validated
    if validated is not None and validated.failure is not None:
        return validated.failure
    if validated is None or validated.challenger is None or validated.incumbent is None:
        return outcome
    objective = rules(trial.objective).value(validated.challenger)
    if objective is None:
        return outcome
    incumbent = rules(trial.objective).value(validated.incumbent)
    shown = False
    if not validated.promote and incumbent is not None:
        objective = min(objective, incumbent)
        low = None if validated.judgement is None else validated.judgement.gain_low_rel
        shown = low is not None and low > 0.0
    return outcome.model_copy(update={"objective": objective, "gain_shown": shown})


def earlier_incumbents(state: RunState) -> list[tuple[EngineConfig, SweepResult]]:
    """The incumbents before the current one, in order, each with the repeats that
    measured it while it held: the baseline's, then each promoted configuration but the
    last."""
    walk = [] if state.baseline is None else [(state.baseline.config, state.baseline.repeats)]
    walk += [(p.config, p.repeats) for p in state.promotions]
    return walk[: len(state.promotions)]
