"""Optuna over the pruned space (TPE or GP), maximising the objective under SLO feasibility.

The study lives in the storage the caller passes, a port the caller owns (None: in memory; the
agent opens the run folder's ``optuna.db``, which optuna-dashboard opens too, in
``kneepoint.run.optuna_storage``): this module never opens a file or a database itself. One
study per search space,
named after the proposer and a hash of the space unless the caller names it. How outcomes
become trial results is in ``kneepoint.policies.search.optuna_space``. SLO feasibility is a trial
constraint (<= 0 feasible) set on each trial, which both samplers read; the samplers'
``constraints_func`` would do the same but is deprecated since Optuna 5.0.

Determinism under replay: the sampler is rebuilt before every ask with a seed derived from
(seed, number of outcomes told, attempt), and the study's finished trials are exactly the
told history in order: an ask is pending only until the next tell (told anything else first,
it is dropped and the outcome added as a new finished trial), and a discarded sample is a FAIL
trial, which samplers ignore. So a fresh proposer told the same history asks what the live one
asks.

Resume: every told trial carries the proposal's fingerprint and its position in the history as
user attributes. A proposer opened on a storage that already holds them skips re-adding what
is there, and fails a RUNNING trial a killed run left behind.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from typing import Any, Literal

import optuna
from optuna.samplers import BaseSampler, GPSampler, RandomSampler, TPESampler
from optuna.trial import Trial, TrialState, create_trial

from kneepoint.policies.search.optuna_space import (
    distributions,
    params_of,
    predict,
    trial_result,
    values_of,
)
from kneepoint.policies.search.proposer import SAMPLED, liar_batch
from kneepoint.policies.search.space import build_config, changes_from_incumbent, effective, show
from kneepoint.records import EngineConfig, KneepointError, Outcome, Proposal, SearchSpace

KEY, INDEX, PROPOSER = "kneepoint_key", "kneepoint_index", "kneepoint_proposer"
STATUS, DETAIL, DISCARDED = "kneepoint_status", "kneepoint_detail", "kneepoint_discarded"
CONSTRAINT = "slo"
INCUMBENT_INDEX = -1
"""The history position of the incumbent's own trial, added from the space before any tell."""
_GP_MODULES = ("torch", "scipy")


class GpDependenciesError(KneepointError, ImportError):
    """sampler='gp' was asked for without torch and scipy installed."""


@dataclass(frozen=True)
class _Pending:
    trial: Trial
    proposal: Proposal


class OptunaProposer:
    """Ask/tell over an Optuna study; see the module docstring."""

    def __init__(
        self,
        space: SearchSpace,
        seed: int = 0,
        *,
        sampler: Literal["tpe", "gp"] = "tpe",
        storage: optuna.storages.BaseStorage | None = None,
        study_name: str | None = None,
        n_startup_trials: int = 10,
        max_attempts: int = 24,
    ) -> None:
        if not hasattr(Trial, "set_constraint"):
            raise ImportError(f"kneepoint needs optuna>=5.0 (found {optuna.__version__})")
        if sampler == "gp":
            _require_gp()
        self.name = f"{SAMPLED}{sampler}"
        self.space, self.seed, self.sampler_kind = space, seed, sampler
        self.n_startup_trials, self.max_attempts = n_startup_trials, max_attempts
        self._distributions = distributions(space)
        self.study = optuna.create_study(
            storage=storage,
            study_name=study_name or f"{self.name}-{_space_id(space)}",
            direction="maximize",
            load_if_exists=True,
            sampler=self._sampler(seed),
        )
        self._stored = self._recover()
        self._told: set[str] = {space.incumbent.fingerprint()}
        self._n_told = 0
        self._pending: _Pending | None = None
        self._add_incumbent()

    def ask(self) -> Proposal | None:
        if self._pending is not None:
            return self._pending.proposal
        for attempt in range(self.max_attempts):
            # A model-based sampler keeps returning its favourite once it has converged; after
            # a few repeats the later attempts sample at random, so a small space (a grid of
            # choices) is searched to the end instead of given up on.
            explore = attempt >= _MODEL_ATTEMPTS
            seed = _derived_seed(self.seed, self._n_told, attempt)
            self.study.sampler = RandomSampler(seed=seed) if explore else self._sampler(seed)
            trial = self.study.ask(self._distributions)
            config = build_config(
                self.space.incumbent, values_of(trial.params, self.space), self.space
            )
            if config is None or config.fingerprint() in self._told:
                trial.set_user_attr(DISCARDED, "invalid" if config is None else "already tried")
                self.study.tell(trial, state=TrialState.FAIL)
                continue
            proposal = self._proposal(config, trial)
            trial.set_user_attr(KEY, proposal.key())
            trial.set_user_attr(PROPOSER, self.name)
            self._pending = _Pending(trial, proposal)
            return proposal
        return None

    def batch(self, n: int) -> list[Proposal]:
        return liar_batch(self, self.space, n)

    def tell(self, proposal: Proposal, outcome: Outcome) -> None:
        key, index = proposal.key(), self._n_told
        self._n_told += 1
        self._told.add(key)
        stored = self._stored.get(index) == key
        pending, self._pending = self._pending, None
        if pending is not None:
            if pending.proposal.key() == key and not stored:
                self._finish(pending.trial, proposal, outcome, index)
                return
            # Another outcome came first: the ask is stale (a fresh proposer replayed with this
            # history would sample anew), and the study keeps the told order.
            pending.trial.set_user_attr(DISCARDED, "superseded: another outcome was told first")
            self.study.tell(pending.trial, state=TrialState.FAIL)
        if not stored:
            self._add(proposal.config, proposal.proposer, outcome, index, self._sampled(proposal))

    def _sampled(self, proposal: Proposal) -> dict[str, Any] | None:
        """The values a sampler drew for a proposal (its ``params``) where they still give its
        configuration in this space: replayed, the study then holds the very values the live
        one was told, not the configuration's rounded ones (0.94 for 0.9400000000000001),
        which would move a model-based sampler's next draw and part a resumed run from the
        live one."""
        params, dists = proposal.params, self._distributions
        if set(params) != set(dists):
            return None
        try:
            if not all(d._contains(d.to_internal_repr(params[n])) for n, d in dists.items()):
                return None
            config = build_config(self.space.incumbent, values_of(params, self.space), self.space)
        except (ValueError, TypeError):
            return None
        return params if config is not None and config.fingerprint() == proposal.key() else None

    def _sampler(self, seed: int) -> BaseSampler:
        if self.sampler_kind == "gp":
            return GPSampler(seed=seed, n_startup_trials=self.n_startup_trials)
        return TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)

    def _recover(self) -> dict[int, str]:
        """Positions and fingerprints of the trials a previous run told; RUNNING trials it
        asked and never told (killed mid-trial) are failed, since nobody will finish them."""
        stored: dict[int, str] = {}
        for trial in self.study.get_trials(deepcopy=False):
            attrs = trial.user_attrs
            if trial.state.is_finished() and INDEX in attrs and KEY in attrs:
                stored[int(attrs[INDEX])] = str(attrs[KEY])
            elif trial.state == TrialState.RUNNING and KEY in attrs:
                self.study.tell(trial.number, state=TrialState.FAIL)
        return stored

    def _add_incumbent(self) -> None:
        """The incumbent's measured objective as a first trial, so the sampler knows the bar."""
        objective = self.space.incumbent_objective
        key = self.space.incumbent.fingerprint()
        if objective is None or self._stored.get(INCUMBENT_INDEX) == key:
            return
        outcome = Outcome(status="ok", objective=objective, feasible=True, detail="incumbent")
        self._add(self.space.incumbent, "incumbent", outcome, INCUMBENT_INDEX)

    def _add(
        self,
        config: EngineConfig,
        proposer: str,
        outcome: Outcome,
        index: int,
        sampled: dict[str, Any] | None = None,
    ) -> None:
        """A finished trial for an outcome the study did not ask for (warm start, replay).
        A configuration outside this space is not added: it stays told, never proposed."""
        params = sampled or params_of(config, self.space)
        if params is None:
            return
        result = trial_result(outcome)
        constraints = None if result.constraint is None else {CONSTRAINT: result.constraint}
        attrs = _attrs(config.fingerprint(), index, proposer, outcome)
        self.study.add_trial(
            create_trial(
                state=result.state,
                value=result.value,
                params=params,
                distributions=self._distributions,
                user_attrs=attrs,
                constraints=constraints,
            )
        )

    def _finish(self, trial: Trial, proposal: Proposal, outcome: Outcome, index: int) -> None:
        result = trial_result(outcome)
        for name, value in _attrs(proposal.key(), index, proposal.proposer, outcome).items():
            trial.set_user_attr(name, value)
        if result.constraint is not None:
            trial.set_constraint(CONSTRAINT, result.constraint)
        self.study.tell(trial, result.value, state=result.state)

    def _proposal(self, config: EngineConfig, trial: Trial) -> Proposal:
        changes = changes_from_incumbent(config, self.space)
        moves = [
            f"{name} {show(effective(self.space.incumbent, name, self.space))} -> {show(new)}"
            for name, new in changes.items()
        ]
        finished = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        exploring = len(finished) < self.n_startup_trials
        how = "random start" if exploring else f"{self.sampler_kind.upper()} model"
        return Proposal(
            config=config,
            changes=changes,
            proposer=self.name,
            reason=f"{self.name} trial {trial.number} ({how}): {', '.join(moves)}",
            prediction=predict(self.space, config),
            params=dict(trial.params),
        )


def _attrs(key: str, index: int, proposer: str, outcome: Outcome) -> dict[str, Any]:
    return {
        KEY: key,
        INDEX: index,
        PROPOSER: proposer,
        STATUS: outcome.status,
        DETAIL: outcome.detail,
    }


def _space_id(space: SearchSpace) -> str:
    """A short stable name for a space: a new space (a new incumbent, other knobs) gets a
    study of its own, and the same space resumes the same study."""
    return hashlib.sha256(space.model_dump_json().encode()).hexdigest()[:8]


_MODEL_ATTEMPTS = 4


def _derived_seed(seed: int, n_told: int, attempt: int) -> int:
    """A sampler seed for one ask, fixed by the history's length (not by what came before)."""
    digest = hashlib.sha256(f"{seed}:{n_told}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _require_gp() -> None:
    missing = []
    for module in _GP_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise GpDependenciesError(
            f"sampler='gp' needs {' and '.join(missing)}, which kneepoint does not install "
            "by default: `pip install torch scipy` (a CPU build of torch is enough; pin the "
            "torch version you have a wheel for, or an unpinned torch may pull several GB of "
            "CUDA packages), or use sampler='tpe'"
        )
