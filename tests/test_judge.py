"""The judge promotes only gains beyond noise and the minimum effect; t quantiles are right."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneepoint.policies.judge.promotion import is_finalist, judge
from kneepoint.policies.judge.stats import t_cdf, t_quantile
from kneepoint.policies.judge.yardstick import screen_bias
from kneepoint.records.judgement import Judgement
from kneepoint.records.ledger import Event, Screened, Validated
from kneepoint.records.objective import SloCapacity
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.tune.execute import screen_pairs

from .conftest import TuneRun

BASE = [10.0, 10.2, 9.9]


@pytest.mark.parametrize(
    ("incumbent", "challenger", "promote", "method", "says"),
    [
        # a clear gain over tight paired repeats
        (BASE, [10.9, 11.2, 10.7], True, "paired_t", "exceeds the 3% minimum effect: promote"),
        # +6% on average, but one pair went the other way: the interval reaches below 0
        ([10.0, 12.0, 9.0], [10.5, 11.0, 11.5], False, "paired_t", "could be noise"),
        # real (+2%, tight) but below the minimum effect
        (
            [10.0, 10.01, 10.02, 9.99],
            [10.2, 10.21, 10.22, 10.19],
            False,
            "paired_t",
            "is real but below the 3% minimum effect",
        ),
        # a clear loss reads as one, not as noise (a challenger whose lowest rate missed
        # the SLO in every repeat measured 0: "-100.0% ... could be noise", 2026-11-29)
        (BASE, [0.0, 0.0, 0.0], False, "paired_t", "is a loss (the whole interval lies below"),
        # a single repeat never promotes, however large the gain
        ([10.0], [15.0], False, "paired_t", "a single repeat of an arm cannot tell"),
        ([10.0, 10.1], [15.0], False, "welch", "a single repeat of an arm cannot tell"),
        # unequal counts: Welch
        (BASE, [11.0, 11.1, 10.9, 11.05], True, "welch", "over 3 vs 4 repeats (Welch)"),
    ],
)
def test_judgement_table(
    incumbent: list[float], challenger: list[float], promote: bool, method: str, says: str
) -> None:
    verdict = judge(incumbent, challenger)
    assert verdict.promote is promote
    assert verdict.method == method
    assert says in verdict.reason
    assert verdict.reason.endswith("promote" if promote else "keep the incumbent")
    assert verdict.n_incumbent == len(incumbent) and verdict.n_challenger == len(challenger)


def test_a_promotion_reads_as_gain_interval_repeats_and_verdict() -> None:
    verdict = judge(BASE, [10.9, 11.2, 10.7])
    assert verdict.gain_rel == pytest.approx(32.8 / 30.1 - 1)
    assert verdict.gain_low_rel is not None and verdict.gain_high_rel is not None
    assert 0 < verdict.gain_low_rel < verdict.gain_rel < verdict.gain_high_rel
    assert verdict.reason == (
        f"{verdict.gain_rel:+.1%} [{verdict.gain_low_rel:+.1%}, {verdict.gain_high_rel:+.1%}] "
        "over 3 paired repeats exceeds the 3% minimum effect: promote"
    )


def test_pairing_removes_drift_that_welch_counts_as_noise() -> None:
    # The machine drifts across the interleaved repeats; the challenger is 5% faster in each.
    incumbent = [10.0, 12.0, 14.0, 16.0]
    challenger = [10.52, 12.58, 14.71, 16.82]
    paired, welch = judge(incumbent, challenger), judge(incumbent, challenger, method="welch")
    assert paired.promote and paired.method == "paired_t"
    assert not welch.promote and "could be noise" in welch.reason
    assert paired.gain_rel == pytest.approx(welch.gain_rel)
    assert paired.min_detectable_effect_rel is not None
    assert welch.min_detectable_effect_rel is not None
    assert paired.min_detectable_effect_rel < welch.min_detectable_effect_rel / 5


@pytest.mark.parametrize("shift", [0.0, 8.0])
def test_bootstrap_agrees_with_t_on_normal_data(shift: float) -> None:
    rng = np.random.default_rng(11)
    incumbent = rng.normal(100.0, 5.0, 30).tolist()
    challenger = rng.normal(100.0 + shift, 5.0, 30).tolist()
    t, boot = judge(incumbent, challenger), judge(incumbent, challenger, method="bootstrap")
    assert boot.method == "bootstrap" and "(bootstrap)" in boot.reason
    assert boot.promote is t.promote is (shift > 0)
    assert boot.gain_rel == pytest.approx(t.gain_rel)
    for ends in ((boot.gain_low_rel, t.gain_low_rel), (boot.gain_high_rel, t.gain_high_rel)):
        assert ends[0] == pytest.approx(ends[1], abs=0.01)


def test_more_repeats_detect_smaller_effects() -> None:
    incumbent, challenger = [10.0, 10.5, 9.5], [10.5, 10.0, 9.5]
    few, many = judge(incumbent, challenger), judge(incumbent * 4, challenger * 4)
    assert few.min_detectable_effect_rel is not None and many.min_detectable_effect_rel is not None
    assert many.min_detectable_effect_rel < few.min_detectable_effect_rel / 2


def test_an_incumbent_that_measured_nothing_loses_to_any_clear_measurement() -> None:
    verdict = judge([0.0, 0.0], [4.0, 4.4])
    assert verdict.promote and verdict.gain_rel is None
    assert "the incumbent's objective averaged 0" in verdict.reason


def test_bad_inputs_are_errors() -> None:
    with pytest.raises(ValueError, match="no measurements"):
        judge([], [1.0])
    with pytest.raises(ValueError, match="finite"):
        judge([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match="as many repeats"):
        judge([1.0, 2.0], [1.0, 2.0, 3.0], method="paired_t")


def test_a_judgement_round_trips_through_json() -> None:
    verdict = judge(BASE, [10.9, 11.1, 10.8])
    assert Judgement.model_validate_json(verdict.model_dump_json()) == verdict


@pytest.mark.parametrize(
    ("screen", "incumbent", "noise", "finalist", "says"),
    [
        (12.0, 10.0, 0.05, True, "screened +20.0% clears the 3% minimum effect and the noise"),
        (10.4, 10.0, 0.05, True, "inside the incumbent's 5% noise: its repeats will tell"),
        (10.2, 10.0, 0.01, False, "is not beyond the 3% minimum effect"),
        (10.2, 10.0, 0.05, False, "is not beyond the 3% minimum effect"),
        (None, 10.0, 0.01, False, "the screen measured no objective"),
        (5.0, 0.0, 0.01, True, "the incumbent has no positive objective"),
    ],
)
def test_finalists_read_beyond_the_minimum_effect(
    screen: float | None, incumbent: float, noise: float, finalist: bool, says: str
) -> None:
    """A screen past the minimum effect is validated, inside the incumbent's noise too: the
    validation's repeats tell a gain from noise (the quickstart with three workers, 512
    sequences screened +5.1% against 6.5% noise and validated +16%)."""
    check = is_finalist(screen, incumbent, noise, min_effect=0.03)
    assert check.finalist is finalist
    assert says in check.reason
    assert check.threshold_rel == 0.03


SCHEDULING_BOUND_PAIRS = [(49.05, 48.73), (79.94, 81.61), (91.64, 89.3), (95.64, 94.22),
                          (101.61, 96.83), (101.6, 96.6)]  # fmt: skip
"""(screen, validated) on the simulator's scheduling-bound scenario (2026-12-03): the start's
knee search against its repeats, then async scheduling, 64, 128 and 256 sequences, and the
combination of the moves measured alone."""


def test_a_screen_is_read_on_the_validations_yardstick() -> None:
    """Four long shots that changed nothing the simulator models each screened 97.1 req/s,
    +3.1% over the incumbent's validated 94.22 (on 2026-11-29 such no-ops spent a validation
    each to measure -1.7%). On the run's screen-over-validation ratio the no-op is +1.6%,
    and a screen of 101.61 (256 sequences, validated +1.9%) still goes on."""
    bias = screen_bias(SCHEDULING_BOUND_PAIRS)
    assert bias == pytest.approx(1.0145, abs=0.001)
    assert is_finalist(97.11, 94.22, 0.01).finalist
    flat = is_finalist(97.11, 94.22, 0.01, screen_bias=bias)
    assert not flat.finalist and flat.gain_rel == pytest.approx(97.11 / bias / 94.22 - 1)
    assert "screened +3.1%, +1.6% read as a validation (this run's screens read +1.5%" in (
        flat.reason
    )
    assert is_finalist(101.61, 94.22, 0.01, screen_bias=bias).finalist
    assert screen_bias([]) == 1.0 and screen_bias([(0.0, 5.0), (3.0, 0.0), (4.0, 2.0)]) == 1.0


def test_pairs_that_disagree_are_no_yardstick() -> None:
    """The agentic quickstart (2026-12-03): the start's knee search read 11.3% above its
    repeats, 1,024-token chunks 6.1%, the winner's screen (a 74-111 req/s bracket) 13.8%
    below. Their median, 1.061, read 512 sequences' +5.2% screen as -0.8%, while no-op long
    shots screened +0.0% and +0.7% over the incumbent: pairs this spread say nothing of the
    yardstick, and the screen is read as it is."""
    pairs = [(44.84, 40.29), (50.44, 47.54), (75.01, 87.06)]
    assert screen_bias(pairs) == 1.0
    assert is_finalist(91.59, 87.06, 0.02, screen_bias=screen_bias(pairs)).finalist
    agreeing = [(100.0, 98.0), (101.0, 99.0), (102.0, 100.0)]
    assert screen_bias(agreeing) == pytest.approx(1.0202, abs=0.0002), "all +2.0%: kept whole"


def test_a_move_validated_before_needs_its_screen_to_confirm_it() -> None:
    """The quickstart with 3 workers (2026-12-03): 1,024-token chunks validated +6.6%
    [+5.5%, +7.6%] from the start, but fp8 weights won the same round by more and were
    promoted; from fp8 the chunks screened 45.65 against 44.75 (+2.0%), under the 3% floor.
    A screen whose rungs sit 10% apart only has to confirm the validated gain, not find it
    again; one that reads below the incumbent does not confirm it."""
    confirmed = is_finalist(45.65, 44.75, 0.0838, screen_bias=1.007, validated_gain=0.066)
    assert confirmed.finalist and confirmed.threshold_rel == 0.0
    assert "confirms the +6.6% its validation showed from the incumbent before" in (
        confirmed.reason
    )
    assert not is_finalist(45.65, 44.75, 0.0838, screen_bias=1.007).finalist
    lost = is_finalist(44.0, 44.75, 0.0838, validated_gain=0.066)
    assert not lost.finalist and "does not confirm the +6.6%" in lost.reason


def test_one_pair_is_no_yardstick() -> None:
    """The agentic quickstart's start read its knee 11.3% above its repeats (44.84 against
    40.29); divided by that, fp8 weights with fp8 KV (screened +7.2%) and a 4,096-token chunk
    budget (+9.6%) fell below the 4.9% floor, nothing was validated, and the run stopped at
    its start, 51% below the grid's optimum (2026-11-29)."""
    start = [(44.84, 40.29)]
    assert screen_bias(start) == 1.0
    assert is_finalist(43.18, 40.29, 0.049, screen_bias=screen_bias(start)).finalist
    two = [math.log(44.84 / 40.29), math.log(60 / 55)]
    middle, error = sum(two) / 2, (two[0] - two[1]) ** 2 / 4  # squared standard error
    assert screen_bias([*start, (60.0, 55.0)]) == pytest.approx(
        math.exp(middle * (1 - error / middle**2))
    )


def test_a_screen_that_is_only_a_floor_gives_no_yardstick_pair(small_run: TuneRun) -> None:
    """The bandwidth-bound scenario: fp8 weights screened 2.53 req/s, where the highest rate
    its bracket tried still met the SLO, and validated 3.13. The pair read screens 19% below
    validations; beside three pairs at +1% to +7% it shrank the yardstick to +0.6%, and three
    long shots that change nothing there (128, 512 and 1,024 sequences) screened +4.5% each
    and spent a validation each (3.2 of the run's 7.9 device-hours) to measure +0.2%
    (benchmarks/regret.py's study, `--studies bandwidth-bound`)."""
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    state = RunState.replay(events, SloCapacity())
    pairs = screen_pairs(state)
    validated = [e.trial for e in events if isinstance(e, Validated) and e.challenger]
    assert len(pairs) == 1 + len(validated) and validated
    floor = "no rate tried failed the SLO (the highest, 2.53 req/s, met it)"

    def floored(event: Event) -> Event:
        if not isinstance(event, Screened) or event.trial != validated[0]:
            return event
        assert event.sweep is not None
        return event.model_copy(
            update={"sweep": event.sweep.model_copy(update={"floor_reason": floor})}
        )

    without = screen_pairs(RunState.replay([floored(e) for e in events], SloCapacity()))
    assert without == [p for i, p in enumerate(pairs) if i != 1]


@pytest.mark.parametrize(
    ("df", "quantile"),
    [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042), (1e6, 1.960)],
)
def test_t_quantiles_match_the_table(df: float, quantile: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(quantile, abs=5e-4)
    assert t_quantile(0.025, df) == pytest.approx(-quantile, abs=5e-4)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.001, 0.999), df=st.floats(0.5, 500.0))
def test_t_quantile_inverts_the_cdf(p: float, df: float) -> None:
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy not installed")
@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.001, 0.999), df=st.floats(0.5, 500.0))
def test_t_quantile_matches_scipy(p: float, df: float) -> None:
    from scipy import stats

    assert t_quantile(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-7, abs=1e-9)
