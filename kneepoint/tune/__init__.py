"""The one tuning loop: pure decisions over a closed set of actions (``decide``), their
executor (``loop``), the steps that measure through ``kneepoint.measure``, proposers,
budgets, deadlines and the checks a study passes before anything starts."""

from kneepoint.tune.burst_step import unmeasured
from kneepoint.tune.decide import (
    Action,
    Done,
    MeasureBaseline,
    Propose,
    Start,
    Stop,
    next_actions,
)
from kneepoint.tune.diagnose import measure_and_diagnose, recorded
from kneepoint.tune.execute import Executor, Measure, proposed
from kneepoint.tune.feasibility import launch_checks, launched_vllm, study_checks
from kneepoint.tune.loop import Now, Tuner, local_now
from kneepoint.tune.pool_loop import Pool, PoolTuner
from kneepoint.tune.proposers import run_proposer
from kneepoint.tune.standing import baseline_words
from kneepoint.tune.steps import Steps, repeats_wanted
from kneepoint.tune.virtual_pool import VirtualPool

__all__ = [
    "Action",
    "Done",
    "Executor",
    "Measure",
    "MeasureBaseline",
    "Now",
    "Pool",
    "PoolTuner",
    "Propose",
    "Start",
    "Steps",
    "Stop",
    "Tuner",
    "VirtualPool",
    "baseline_words",
    "launch_checks",
    "launched_vllm",
    "local_now",
    "measure_and_diagnose",
    "next_actions",
    "proposed",
    "recorded",
    "repeats_wanted",
    "run_proposer",
    "study_checks",
    "unmeasured",
]
