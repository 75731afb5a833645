"""The validation's early look (``kneepoint.policies.judge.early``): one interleaved pair
promotes a gain far beyond the incumbent's known noise; anything less measures the other
repeats (the phases and the judging of real parts: tests/test_split_validation.py). And the
same known noise closing a finalist below its round's winner
(``kneepoint.policies.judge.contention``)."""

from __future__ import annotations

import pytest

from kneepoint.policies.judge.contention import out_of_contention
from kneepoint.policies.judge.early import early_look
from kneepoint.records.judgement import Judgement


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


def _winner(gain: float, pairs: int) -> Judgement:
    return Judgement(
        promote=True, method="known_noise", n_incumbent=pairs, n_challenger=pairs,
        incumbent_objective_mean=100.0, challenger_objective_mean=100.0 * (1 + gain),
        gain_rel=gain, gain_low_rel=None, gain_high_rel=None, min_detectable_effect_rel=None,
        confidence=0.975, min_effect_rel=0.03, reason="won",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("challenger", "out"),
    [
        # 5% noise over 3 repeats: t(98.75%, 2 dof) = 6.2, and two single pairs' gains differ
        # by 2 x 5% x 6.2 = 62% before it is more than noise.
        ([100.0], True),  # 0% + 62% is below the winner's +71% (rag's first move, 2026-11-29)
        ([110.0], False),  # +10% + 62% reaches it: it may still be the better winner
        ([100.0, 104.0], True),  # two pairs: 2% + 54% (the spread falls as sqrt(2 / 1 + 2 / 2))
    ],
)
def test_a_finalist_below_the_winner_by_more_than_the_noise_is_out_of_contention(
    challenger: list[float], out: bool
) -> None:
    known = [95.0, 100.0, 105.0]
    incumbent = [100.0] * len(challenger)
    verdict = out_of_contention(incumbent, challenger, _winner(0.71, 1), known)
    assert (verdict is not None) is out
    if verdict is not None:
        assert not verdict.promote and verdict.n_challenger == len(challenger)
        assert "below the round's winner (+71.0%)" in verdict.reason


def test_without_known_noise_a_finalist_stays_in_contention() -> None:
    assert out_of_contention([100.0], [50.0], _winner(0.71, 1), [100.0]) is None
    assert out_of_contention([], [], _winner(0.71, 1), [95.0, 100.0, 105.0]) is None
