"""How much load one point sends: seconds of arrivals, stretched to what the study's requests
need to reach steady state, and never fewer than a floor of requests."""

from __future__ import annotations

from dataclasses import dataclass

from kneepoint.load.settle import ramp_seconds, settle_seconds
from kneepoint.records import StudySpec


@dataclass(frozen=True, slots=True)
class PointSize:
    """How much load one point sends: ``seconds`` of arrivals (at least ``settle_s``, the
    span a point needs to reach steady state), and at least ``min_requests``."""

    seconds: float = 20.0
    min_requests: int = 40
    settle_s: float = 0.0
    warmup_s: float = 0.0
    """Least time cut from the start of the stable window (one request's lifetime)."""

    def requests(self, rate_rps: float) -> int:
        """Requests at ``rate_rps``. A retake sends as many: past the ceiling a longer point
        grows a longer queue, so a longer retake would judge a point by another yardstick."""
        return max(self.min_requests, round(rate_rps * max(self.seconds, self.settle_s)))

    @classmethod
    def for_study(cls, study: StudySpec, seconds: float) -> PointSize:
        """``seconds`` of arrivals, stretched to what the study's requests need to settle."""
        ramp = ramp_seconds(study.workload, study.slo)
        return cls(seconds, settle_s=settle_seconds(study.workload, study.slo), warmup_s=ramp)
