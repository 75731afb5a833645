"""The clock a load point's probes share: seconds since the point's origin, monotonic, so the
load generator's sends, the scrapes and the GPU samples line up on one time axis."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Clock:
    """Seconds since a load point's origin, on the monotonic clock every probe shares."""

    origin: float

    @classmethod
    def start(cls) -> Clock:
        return cls(time.perf_counter())

    def now(self) -> float:
        return time.perf_counter() - self.origin
