"""Where to look next: the pruned search space, the proposer interface (ask, batch, tell) and
its plug-ins (coordinate descent, Optuna over the pruned space, both in phases), and learning
from misses within a run. Pure: Optuna's storage is opened by the agent and passed in."""

from kneepoint.policies.search.combination import Combination
from kneepoint.policies.search.coordinate import CoordinateDescent
from kneepoint.policies.search.known import Known
from kneepoint.policies.search.learning import (
    best_left,
    learned_factors,
    nothing_worth_trying,
    single_knob_errors,
)
from kneepoint.policies.search.long_shots import LongShots, ThenLongShots
from kneepoint.policies.search.optuna_search import OptunaProposer
from kneepoint.policies.search.phased import Phased
from kneepoint.policies.search.proposer import Proposer, replay
from kneepoint.policies.search.pruned_space import ShortOfRate, search_space
from kneepoint.policies.search.step_ons import StepOns
from kneepoint.policies.search.worth import PRIOR_SPREAD_LOG, spread_log

__all__ = [
    "PRIOR_SPREAD_LOG",
    "Combination",
    "CoordinateDescent",
    "Known",
    "LongShots",
    "OptunaProposer",
    "Phased",
    "Proposer",
    "ShortOfRate",
    "StepOns",
    "ThenLongShots",
    "best_left",
    "learned_factors",
    "nothing_worth_trying",
    "replay",
    "search_space",
    "single_knob_errors",
    "spread_log",
]
