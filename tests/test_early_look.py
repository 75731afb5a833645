"""The validation's early look (``kneepoint.policies.judge.early``): one interleaved pair
promotes a gain far beyond the incumbent's known noise; anything less measures the other
repeats (the phases and the judging of real parts: tests/test_split_validation.py)."""

from __future__ import annotations

import pytest

from kneepoint.policies.judge.early import early_look


def test_a_gain_far_beyond_known_noise_promotes_from_one_pair() -> None:
    # The real CPU tier's KV move: +103% on its first pair (cpu-peer-autotune's ledger).
    verdict = early_look(5.17, 10.52, [5.0, 5.1, 4.9, 5.05], min_effect=0.03, confidence=0.95)
    assert verdict is not None and verdict.promote and verdict.method == "known_noise"
    assert verdict.gain_low_rel is not None and verdict.gain_low_rel > 0.03
    assert verdict.confidence == pytest.approx(0.975)
    assert "from the first paired repeat" in verdict.reason


@pytest.mark.parametrize(
    ("known", "challenger", "why"),
    [
        ([5.19, 4.26], 10.52, "two repeats: one degree of freedom says little of the noise"),
        ([5.0, 5.0, 5.0], 6.5, "no measured noise is taken as the minimum effect, not zero"),
        ([5.0, 5.5, 4.5, 5.2], 7.0, "+35% inside 97.5% of 8.3% noise"),
        ([5.0], 50.0, "one repeat says nothing of the noise"),
    ],
)
def test_anything_short_of_the_bar_is_not_a_verdict(
    known: list[float], challenger: float, why: str
) -> None:
    assert early_look(5.17, challenger, known) is None, why


def test_an_incumbent_that_measured_nothing_has_no_early_look() -> None:
    assert early_look(0.0, 3.0, [1.0, 1.1, 0.9]) is None
