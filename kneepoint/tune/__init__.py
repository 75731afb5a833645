"""The one tuning loop: pure decisions over a closed set of actions (``decide``), their
executor (``loop``), the steps that measure through ``kneepoint.measure``, proposers,
budgets, deadlines and the checks a study passes before anything starts."""

from kneepoint.tune.diagnose import measure_and_diagnose, recorded
from kneepoint.tune.execute import Measure
from kneepoint.tune.feasibility import launch_checks, launched_vllm, study_checks
from kneepoint.tune.loop import Tuner
from kneepoint.tune.pool_loop import Pool, PoolTuner
from kneepoint.tune.virtual_pool import VirtualPool

__all__ = [
    "Measure",
    "Pool",
    "PoolTuner",
    "Tuner",
    "VirtualPool",
    "launch_checks",
    "launched_vllm",
    "measure_and_diagnose",
    "recorded",
    "study_checks",
]
