"""The Optuna proposer's own duties: an SQLite study optuna-dashboard can open, resume without
duplicates, warm start from coordinate descent, failures told as trial results, dict choices."""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle
from pathlib import Path

import optuna
import pytest
from optuna.storages import get_storage
from optuna.trial import TrialState

from kneepoint.policies.search import optuna_search
from kneepoint.policies.search.coordinate import CoordinateDescent
from kneepoint.policies.search.optuna_search import (
    DISCARDED,
    INDEX,
    KEY,
    PROPOSER,
    STATUS,
    GpDependenciesError,
    OptunaProposer,
)
from kneepoint.policies.search.optuna_space import distributions, params_of, predict, values_of
from kneepoint.policies.search.proposer import replay
from kneepoint.records.engine import EngineConfig
from kneepoint.records.proposal import Outcome, Prediction, Proposal, TrialStatus
from tests.support.synthetic_space import SPEC, candidate, capacity, drive, make_space

History = list[tuple[Proposal, Outcome]]
STATUSES: tuple[TrialStatus, ...] = (
    "ok",
    "infeasible",
    "startup_failed",
    "crashed",
    "timed_out",
    "invalid_measurement",
)


def _mixed() -> Callable[[EngineConfig], Outcome]:
    """An objective whose outcomes take each status in turn."""
    statuses = cycle(STATUSES)

    def objective(config: EngineConfig) -> Outcome:
        status = next(statuses)
        if status == "ok":
            return capacity(config)
        return Outcome(status=status, detail=f"synthetic {status}")

    return objective


def _told(study: optuna.Study) -> dict[int, optuna.trial.FrozenTrial]:
    return {t.user_attrs[INDEX]: t for t in study.trials if INDEX in t.user_attrs}


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'optuna.db'}"


@pytest.fixture(scope="module")
def sqlite_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, History]:
    """One study in SQLite, every status told twice (the storage is slow to create)."""
    url = _sqlite(tmp_path_factory.mktemp("optuna"))
    history = drive(
        OptunaProposer(make_space(), 0, storage=get_storage(url), study_name="run"), 12, _mixed()
    )
    return url, history


def test_the_sqlite_study_opens_with_load_study_and_holds_the_told_trials(
    sqlite_run: tuple[str, History],
) -> None:
    url, history = sqlite_run
    told = _told(optuna.load_study(study_name="run", storage=url))
    assert sorted(told) == list(range(-1, len(history)))
    assert told[-1].user_attrs[PROPOSER] == "incumbent"
    for index, (proposal, outcome) in enumerate(history):
        trial = told[index]
        assert trial.user_attrs[KEY] == proposal.key()
        assert trial.user_attrs[PROPOSER] == "optuna-tpe"
        assert trial.user_attrs[STATUS] == outcome.status
        assert trial.params == proposal.params


@pytest.mark.parametrize(
    ("status", "state", "value", "constraint"),
    [
        ("ok", TrialState.COMPLETE, None, 0.0),
        ("infeasible", TrialState.FAIL, None, None),
        ("startup_failed", TrialState.COMPLETE, 0.0, 2.0),
        ("crashed", TrialState.COMPLETE, 0.0, 2.0),
        ("timed_out", TrialState.COMPLETE, 0.0, 2.0),
        ("invalid_measurement", TrialState.FAIL, None, None),
    ],
)
def test_each_outcome_is_told_as_its_trial_result(
    sqlite_run: tuple[str, History],
    status: str,
    state: TrialState,
    value: float | None,
    constraint: float | None,
) -> None:
    url, history = sqlite_run
    told = _told(optuna.load_study(study_name="run", storage=url))
    matching = [i for i, (_, outcome) in enumerate(history) if outcome.status == status]
    assert matching
    for index in matching:
        trial, outcome = told[index], history[index][1]
        assert trial.state == state
        assert trial.value == (outcome.objective if status == "ok" else value)
        assert trial.constraints == ({} if constraint is None else {"slo": constraint})


def test_resuming_on_the_storage_adds_nothing_twice_and_asks_what_the_killed_run_asked(
    tmp_path: Path,
) -> None:
    url, space = _sqlite(tmp_path), make_space()
    live = OptunaProposer(space, 5, storage=get_storage(url), study_name="run", n_startup_trials=4)
    history = drive(live, 8)
    in_flight = live.ask()  # asked, then the agent was killed before the outcome came
    assert in_flight is not None
    resumed = replay(
        OptunaProposer(space, 5, storage=get_storage(url), study_name="run", n_startup_trials=4),
        history,
    )
    study = optuna.load_study(study_name="run", storage=url)
    assert sorted(_told(study)) == list(range(-1, 8))
    assert not study.get_trials(states=(TrialState.RUNNING,))
    again = resumed.ask()
    assert again is not None and again.key() == in_flight.key()
    drive(resumed, 3)
    keys = [
        t.user_attrs[KEY] for t in _told(optuna.load_study(study_name="run", storage=url)).values()
    ]
    assert len(keys) == len(set(keys)) == 12


def test_warm_start_from_coordinate_descent_history() -> None:
    space = make_space()
    history = drive(CoordinateDescent(space), 100)
    assert len(history) >= 5
    proposer = replay(OptunaProposer(space, 0, n_startup_trials=5), history)
    told = _told(proposer.study)
    assert len(told) == len(history) + 1
    first_config, first_outcome = history[0][0].config, history[0][1]
    assert told[0].user_attrs[PROPOSER] == "coordinate"
    assert told[0].params["max_num_seqs"] == first_config.max_num_seqs
    assert told[0].params["max_num_batched_tokens"] == 2048  # unset: the engine's value
    assert told[0].value == first_outcome.objective
    proposal = proposer.ask()
    assert proposal is not None and "TPE model" in proposal.reason
    assert proposal.key() not in {p.key() for p, _ in history}


def test_a_proposal_outside_the_space_is_remembered_but_not_added() -> None:
    space = make_space()
    proposer = OptunaProposer(space, 0)
    for config in (
        space.incumbent.replace(max_num_seqs=4096),  # beyond the knob's domain
        space.incumbent.replace(enforce_eager=True),  # a knob this space does not search
    ):
        proposal = Proposal(
            config=config,
            changes={},
            proposer="manual",
            reason="set by hand",
            prediction=Prediction(capacity_ratio=1.0, reason="none"),
        )
        proposer.tell(proposal, capacity(config))
    drive(proposer, 1)
    assert sorted(_told(proposer.study)) == [-1, 2]


def test_an_ask_overtaken_by_another_outcome_is_dropped_and_the_study_keeps_told_order() -> None:
    space = make_space()
    live = OptunaProposer(space, 0, n_startup_trials=2)
    asked = live.ask()
    assert asked is not None
    other = drive(CoordinateDescent(space), 1)
    live.tell(*other[0])
    renewed, fresh = live.ask(), replay(OptunaProposer(space, 0, n_startup_trials=2), other).ask()
    assert renewed is not None and fresh is not None and renewed.key() == fresh.key()
    history = [*other, (asked, capacity(asked.config))]
    live.tell(*history[1])  # the first ask ran after all: it is told as any other outcome
    discarded = [t.user_attrs.get(DISCARDED) for t in live.study.trials]
    assert discarded.count("superseded: another outcome was told first") == 2
    assert [t.user_attrs[KEY] for t in _told(live.study).values()][1:] == [
        p.key() for p, _ in history
    ]
    fresh = replay(OptunaProposer(space, 0, n_startup_trials=2), history)
    live_next, fresh_next = live.ask(), fresh.ask()
    assert live_next is not None and fresh_next is not None
    assert live_next.key() == fresh_next.key()


def test_when_every_configuration_was_tried_it_asks_nothing() -> None:
    space = make_space(candidates=(candidate("async_scheduling", "to", 1.1, True),))
    proposer = OptunaProposer(space, 0, max_attempts=4)
    assert [p.config.async_scheduling for p, _ in drive(proposer, 5)] == [True]
    assert proposer.ask() is None
    reasons = {t.user_attrs.get(DISCARDED) for t in proposer.study.trials}
    assert "already tried" in reasons


def test_different_seeds_ask_differently() -> None:
    first = [p.key() for p, _ in drive(OptunaProposer(make_space(), 0), 6)]
    second = [p.key() for p, _ in drive(OptunaProposer(make_space(), 1), 6)]
    assert first != second


def test_dict_choices_travel_as_canonical_json() -> None:
    space = make_space()
    config = space.incumbent.replace(speculative_config=SPEC, max_num_seqs=512)
    params = params_of(config, space)
    assert params is not None
    encoded = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    assert params["speculative_config"] == encoded
    assert params["speculative_config"] in distributions(space)["speculative_config"].choices  # type: ignore[attr-defined]
    assert values_of(params, space)["speculative_config"] == SPEC
    assert values_of(params, space)["max_num_seqs"] == 512


def test_predictions_take_the_largest_gain_among_knobs_moved_the_diagnosed_way() -> None:
    space = make_space()
    along = space.incumbent.replace(max_num_seqs=512, max_num_batched_tokens=1024)
    prediction = predict(space, along)
    assert prediction.capacity_ratio == 1.2  # max_num_seqs up; the token budget went down
    assert prediction.reason.startswith("max_num_seqs 256 -> 512: the diagnosis points at")
    against = predict(space, space.incumbent.replace(max_num_seqs=128))
    assert against.capacity_ratio == 1.0 and "exploration" in against.reason


def test_gp_without_torch_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = optuna_search.importlib.import_module

    def no_torch(name: str, package: str | None = None) -> object:
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real(name, package)

    monkeypatch.setattr(optuna_search.importlib, "import_module", no_torch)
    with pytest.raises(GpDependenciesError, match=r"needs torch.*pip install torch scipy"):
        OptunaProposer(make_space(), 0, sampler="gp")


def test_each_space_gets_its_own_study_in_a_shared_storage() -> None:
    storage = optuna.storages.InMemoryStorage()
    first, again = (OptunaProposer(make_space(), 0, storage=storage) for _ in range(2))
    other = OptunaProposer(make_space(incumbent_objective=1.0), 0, storage=storage)
    names = optuna.get_all_study_names(storage)
    assert len(names) == 2 and all(name.startswith("optuna-tpe-") for name in names)
    assert first.study.study_name == again.study.study_name != other.study.study_name
