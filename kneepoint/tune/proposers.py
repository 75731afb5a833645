"""Every proposer the loop can use, by the name a study gives (``tuning.proposer``), built over
one search space: coordinate descent, Optuna over the pruned space, or ``auto`` (coordinate
descent first, then Optuna once its walk is done)."""

from __future__ import annotations

from collections.abc import Callable

from kneepoint.policies.coordinate import CoordinateDescent
from kneepoint.policies.optuna_search import OptunaProposer
from kneepoint.policies.phased import Phased
from kneepoint.policies.proposer import Proposer
from kneepoint.records.proposal import SearchSpace
from kneepoint.records.study import StudySpec
from kneepoint.run.optuna_storage import open_storage

Factory = Callable[[StudySpec, SearchSpace, str, str], Proposer]
"""(study, space, Optuna storage URL, Optuna study name) -> a proposer. The storage is opened
here, by the agent (``kneepoint.run.optuna_storage``), never by the policy."""


def _coordinate(study: StudySpec, space: SearchSpace, _url: str, _name: str) -> Proposer:
    return CoordinateDescent(space, study.seed, min_gain=study.tuning.min_effect_rel)


def _optuna(study: StudySpec, space: SearchSpace, url: str, name: str) -> Proposer:
    storage = open_storage(url)
    return OptunaProposer(
        space, study.seed, sampler=study.tuning.sampler, storage=storage, study_name=name
    )


def _auto(study: StudySpec, space: SearchSpace, url: str, name: str) -> Proposer:
    return Phased(_coordinate(study, space, url, name), lambda: _optuna(study, space, url, name))


PROPOSERS: dict[str, Factory] = {"coordinate": _coordinate, "optuna": _optuna, "auto": _auto}
