"""Learning from misses: a knob's moves re-priced by what its last measured move gave, and the
stop when nothing left is predicted to beat the noise."""

from __future__ import annotations

from pydantic import JsonValue

from kneepoint.policies.search.learning import (
    best_left,
    learned_factors,
    move_words,
    nothing_worth_trying,
)
from kneepoint.records.engine import EngineConfig
from kneepoint.records.proposal import Prediction, Proposal
from tests.support.synthetic_space import candidate


def proposal(changes: dict[str, JsonValue], predicted: float, repriced_by: float = 1.0) -> Proposal:
    prediction = Prediction(capacity_ratio=predicted, reason="r", repriced_by=repriced_by)
    return Proposal(config=EngineConfig(model="m"), changes=changes, proposer="coordinate",
                    reason="r", prediction=prediction)  # fmt: skip


def test_a_miss_reprices_the_next_move_of_the_same_knob_only() -> None:
    # The real H100 case: max_num_seqs predicted at 1.35x measured 1.01x.
    factors = learned_factors([(proposal({"max_num_seqs": 1024}, 1.35), 1.01),
                               (proposal({"max_num_seqs": 512, "quantization": "fp8"}, 1.2),
                                1.3)])  # fmt: skip
    assert factors == {"max_num_seqs": 1.01 / 1.35}  # several knobs at once teach nothing
    best = best_left([candidate("max_num_seqs", "up", 1.35),
                      candidate("quantization", "to", 1.08, "fp8")], factors)  # fmt: skip
    assert best is not None and best.candidate.knob.name == "quantization"
    assert best.ratio == 1.08


def test_the_latest_move_of_a_knob_is_the_one_that_counts() -> None:
    factors = learned_factors([(proposal({"max_num_seqs": 64}, 1.6), 1.5),
                               (proposal({"max_num_seqs": 128}, 1.6), 1.0)])  # fmt: skip
    assert factors["max_num_seqs"] == 1.0 / 1.6


def test_a_move_already_repriced_is_judged_against_its_own_prediction() -> None:
    # The second move was predicted 1.6x, shown re-priced by the first's 0.5 as 0.8x; it
    # measured 0.8x, so the knob's moves give half of their own predictions, not all of it.
    factors = learned_factors(
        [
            (proposal({"max_num_seqs": 64}, 1.6), 0.8),
            (proposal({"max_num_seqs": 128}, 0.8, repriced_by=0.5), 0.8),
        ]
    )
    assert factors["max_num_seqs"] == 0.5


def test_nothing_left_worth_trying_says_which_move_and_why() -> None:
    factors = {"max_num_seqs": 1.0 / 1.6}
    best = best_left([candidate("max_num_seqs", "up", 1.6)], factors)
    why = nothing_worth_trying(best, 0.03)
    assert why == ("nothing left worth trying: the best move left, max_num_seqs up, is "
                   "predicted at 1.00x once re-priced "
                   "by its last measured move (0.62 of what was predicted), inside the 3.0% "
                   "that noise and the least effect worth promoting allow")  # fmt: skip
    assert nothing_worth_trying(best_left([candidate("max_num_seqs", "up", 1.6)], {}), 0.03) is None
    assert nothing_worth_trying(None, 0.03) == "no candidate is left"


def test_a_move_to_a_value_names_the_value() -> None:
    """It read "the best move left, kv_cache_dtype to, is predicted at 1.01x" (issue "Step
    13")."""
    fp8 = nothing_worth_trying(
        best_left([candidate("kv_cache_dtype", "to", 1.01, "fp8")], {}), 0.03
    )
    assert fp8 is not None and "the best move left, kv_cache_dtype to fp8, is" in fp8
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    ngram = best_left([candidate("speculative_config", "to", 1.01, spec)], {})
    assert move_words(ngram.candidate) == (  # type: ignore[union-attr]
        'speculative_config to {"method": "ngram", "num_speculative_tokens": 3}'
    )
