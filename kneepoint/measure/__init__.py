"""How one configuration is measured: the sweep protocol (which rates, the retakes a point that
cannot tell gets, the knee and the capacity it reads; no side effect of its own) and the
harness that runs it on a study's backend (``bench``: fresh servers, transient retries, device
time, every point kept), telling a ``Progress`` of each sweep and point. The servers, load and
telemetry themselves are ``kneepoint.probes``."""

from kneepoint.measure.bench import Bench, with_retried
from kneepoint.measure.diagnosis import diagnosis_sweep
from kneepoint.measure.progress import LogProgress, Progress, duration
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.measure.sweep import knee_search
from kneepoint.measure.trial_failure import TrialFailedError
from kneepoint.measure.validation import validate_pair
from kneepoint.measure.watch import Watched

__all__ = [
    "Bench",
    "LogProgress",
    "Progress",
    "TrialFailedError",
    "Watched",
    "diagnosis_sweep",
    "duration",
    "knee_search",
    "study_knee_search",
    "validate_pair",
    "with_retried",
]
