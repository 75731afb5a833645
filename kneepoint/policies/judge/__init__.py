"""Whether a challenger beats the incumbent beyond the measured noise (``promotion``: Welch or
bootstrap intervals over repeated sweeps), a validation's judgement from its measured parts
(``verdict``) and whether a screen makes a finalist. Pure."""

from kneepoint.policies.judge.budget_cut import cut_short, ended_by_budget, next_phase_s
from kneepoint.policies.judge.contention import out_of_contention
from kneepoint.policies.judge.early import early_look
from kneepoint.policies.judge.promotion import is_finalist, judge
from kneepoint.policies.judge.verdict import judged, measured_repeats, next_repeats, outrun
from kneepoint.policies.judge.yardstick import screen_bias

__all__ = [
    "cut_short",
    "early_look",
    "ended_by_budget",
    "is_finalist",
    "judge",
    "judged",
    "measured_repeats",
    "next_phase_s",
    "next_repeats",
    "out_of_contention",
    "outrun",
    "screen_bias",
]
