"""A prober a person can watch and an interrupt cannot empty: each point measured is told to
the command's progress as it lands and kept, so a command stopped by Ctrl-C (or SIGTERM)
still writes what it measured, as a sweep marked interrupted."""

from __future__ import annotations

from kneepoint.load import read_sweep, slo_margin
from kneepoint.measure.progress import Progress
from kneepoint.probes.backends import Prober
from kneepoint.records import EngineConfig, LoadPoint, Slo, SweepKind, SweepPoint, SweepResult


class Watched:
    """``probe`` with every point reported under ``label`` and kept."""

    def __init__(self, probe: Prober, progress: Progress, label: str, slo: Slo | None) -> None:
        self.probe, self.progress, self.label, self.slo = probe, progress, label, slo
        self.points: list[SweepPoint] = []

    def __call__(self, rate_rps: float, repeat: int, attempt: int = 0, /) -> LoadPoint:
        point = self.probe(rate_rps, repeat, attempt)
        self.points.append(
            SweepPoint(
                rate_rps=rate_rps,
                repeat=repeat,
                attempt=attempt,
                margin=slo_margin(point, self.slo),
                point=point,
            )
        )
        self.progress.point(self.label, rate_rps, repeat, point)
        return point

    def interrupted(self, config: EngineConfig, kind: SweepKind = "knee") -> SweepResult:
        """What was measured before the interrupt, read as a sweep (marked interrupted)."""
        result = read_sweep(self.points, kind, config)
        return result.model_copy(update={"interrupted": True})
