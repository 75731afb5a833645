"""One sweep's points as they are measured: the time cap, the retakes a point that cannot
tell (or that contradicts its configuration's curve) gets; the points read as one result by
``kneepoint.load.read_sweep``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import structlog

from kneepoint.load import read_sweep, slo_margin
from kneepoint.probes.backends import Prober
from kneepoint.records import EngineConfig, Slo, SweepKind, SweepPoint, SweepResult

log = structlog.get_logger(__name__)


Clock = Callable[[], float]
"""Seconds on whatever clock a time cap counts (wall time, or a target's device time)."""
SLACK = 1.25
"""A miss contradicts a pass only at least this factor below it (and a pass a miss this far
above): closer than that the two are the knee's own noise. On the CPU build the same server's
knee moved 10-15% between repeats (31.4 and 34.5 req/s met and missed in turn), where a host
blip put a miss at 24.4 req/s below passes up to 36.6 (1.5x)."""


class SweepRun:
    """Points measured so far, the time cap, and the retakes a point that cannot tell gets."""

    def __init__(
        self,
        slo: Slo | None,
        time_cap_s: float | None,
        clock: Clock = time.monotonic,
        retakes: int = 1,
        reference: Sequence[SweepPoint] = (),
    ) -> None:
        """``reference``: points of the same configuration measured before (earlier legs),
        which a new point must not contradict without a retake."""
        self.slo, self.points = slo, list[SweepPoint]()
        self.clock, self.started = clock, clock()
        self.time_cap_s, self.retakes = time_cap_s, retakes
        self.reference = tuple(reference)
        self.capped = False

    def over_time(self) -> bool:
        if self.time_cap_s is not None and self.clock() - self.started >= self.time_cap_s:
            self.capped = True
        return self.capped

    def measure(
        self, probe: Prober, rate: float, repeat: int = 0, arm: str = "incumbent"
    ) -> SweepPoint:
        """The rate measured, and measured again (up to ``retakes`` times, within the time
        cap) while it cannot tell or contradicts the configuration's curve: the last attempt.
        A contradiction the retake does not repeat was the host's: it is superseded."""
        entry = self._once(probe, rate, repeat, arm, 0)
        for attempt in range(1, self.retakes + 1):
            doubt = entry.point.invalid_reason() or self._contradiction(entry)
            if doubt is None or self.over_time():
                break
            log.info("sweep.retake", rate_rps=round(rate, 3), attempt=attempt, why=doubt)
            retake = self._once(probe, rate, repeat, arm, attempt)
            if entry.counted and retake.counted and self._contradiction(retake) is None:
                self._supersede(entry)
            entry = retake
        return entry

    def _contradiction(self, entry: SweepPoint) -> str | None:
        """How a counted point contradicts the counted points of its configuration (this
        sweep's and ``reference``'s): a miss at a rate well below one that met the SLO, or
        a pass well above one that missed it. None where it does not."""
        if not entry.counted:
            return None
        others = [
            p
            for p in (*self.reference, *self.points)
            if p is not entry and p.counted and p.arm == entry.arm
        ]
        if entry.failed:
            above = [
                p.rate_rps for p in others if p.passed and p.rate_rps >= entry.rate_rps * SLACK
            ]
            if above:
                return (
                    f"missed the SLO at {entry.rate_rps:.2f} req/s, below {max(above):.2f} "
                    "req/s, which met it"
                )
            return None
        below = [p.rate_rps for p in others if p.failed and p.rate_rps * SLACK <= entry.rate_rps]
        if below:
            return (
                f"met the SLO at {entry.rate_rps:.2f} req/s, above {min(below):.2f} req/s, "
                "which missed it"
            )
        return None

    def _supersede(self, entry: SweepPoint) -> None:
        index = next(i for i, p in enumerate(self.points) if p is entry)
        self.points[index] = entry.model_copy(update={"superseded": True})

    def _once(self, probe: Prober, rate: float, repeat: int, arm: str, attempt: int) -> SweepPoint:
        point = probe(rate, repeat, attempt)
        entry = SweepPoint(
            rate_rps=rate,
            repeat=repeat,
            arm=arm,
            attempt=attempt,
            margin=slo_margin(point, self.slo),
            point=point,
        )
        self.points.append(entry)
        log.info(
            "sweep.point",
            arm=arm,
            repeat=repeat,
            rate_rps=round(rate, 3),
            margin=round(entry.margin, 3),
            goodput_rps=round(point.goodput_rps, 3),
            valid=point.valid,
            attempt=attempt,
        )
        return entry

    def result(self, kind: SweepKind, config: EngineConfig, arm: str = "incumbent") -> SweepResult:
        return read_sweep(
            self.points,
            kind,
            config,
            arm=arm,
            capped=self.capped,
            elapsed_s=self.clock() - self.started,
        )
