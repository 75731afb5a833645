"""A candidate's rationale is said in full once a run: the walk's later steps on the same knob
point back to the trial that said it (issue "Step 17", part 5: a 600-character explanation
printed at every step of one knob)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kneepoint.tune.execute import reason_once

WHY = "a higher cap admits the waiting requests: 2.00x the batch would serve 1.11x the tokens"


def _trial(moved: str, later: str = "") -> Any:
    said = f"{moved}: {WHY}"
    return SimpleNamespace(
        proposal=SimpleNamespace(reason=said + later, prediction=SimpleNamespace(reason=said))
    )


def test_a_later_step_on_the_same_candidate_points_back() -> None:
    state: Any = SimpleNamespace(trials={
        2: _trial("max_num_seqs 256 -> 512"),
        3: _trial("max_num_seqs 256 -> 362", " (step 2 on this knob: less expected)"),
    })  # fmt: skip
    assert reason_once(state, 2) == f"max_num_seqs 256 -> 512: {WHY}"
    assert reason_once(state, 3) == (
        "max_num_seqs 256 -> 362: as trial 2 (step 2 on this knob: less expected)"
    )


def test_an_optuna_trial_without_a_rationale_is_said_as_it_is() -> None:
    plain = SimpleNamespace(reason="optuna-tpe trial 3 (random start): max_num_seqs 256 -> 634",
                            prediction=SimpleNamespace(reason="optuna-tpe trial 3"))  # fmt: skip
    state: Any = SimpleNamespace(trials={9: SimpleNamespace(proposal=plain)})
    assert reason_once(state, 9) == plain.reason
