"""What binds: a sweep read at its knee (``observe``), the evidence of each resource (GPU
counters, or the step's roofline estimate when they are missing), and the diagnosis that names
the binding resource (``diagnose``). Pure."""

from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import ConfigContext, context_of
from kneepoint.policies.diagnosis.evidence import (
    CAP_PINNED_FROM,
    PREEMPTIONS_PER_REQUEST,
    cap_pinned,
    preemptions_per_request,
)
from kneepoint.policies.diagnosis.observe import knee_points, observe_study
from kneepoint.policies.diagnosis.step_estimate import StepEstimate, estimate_step, observed_shape

__all__ = [
    "CAP_PINNED_FROM",
    "PREEMPTIONS_PER_REQUEST",
    "ConfigContext",
    "StepEstimate",
    "cap_pinned",
    "context_of",
    "diagnose",
    "estimate_step",
    "knee_points",
    "observe_study",
    "observed_shape",
    "preemptions_per_request",
]
