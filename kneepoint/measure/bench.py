"""The loop's measuring hand: each kind of sweep the loop asks for, on the study's backend,
with every point's records kept in the trial's folder and the device time it cost.

A server that will not start, dies or hangs becomes a ``TrialFailedError`` carrying the trial
status it means and the device time already spent (``kneepoint.measure.trial_failure``); the
loop records it as an outcome. Validation's interleaved legs: ``kneepoint.measure.validation``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from kneepoint.load.objective import rules
from kneepoint.load.plan import PlannedRequest
from kneepoint.measure import sweep
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.measure.trial_failure import FAILURE_STATUS, TrialFailedError, retrying
from kneepoint.physics.defaults import UnmodeledSettingError
from kneepoint.probes.server_failure import ServerFailedError
from kneepoint.probes.target import Prober
from kneepoint.probes.targets import PointArtifacts, PointSize, Target, open_target
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.measure import RequestRecord
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepPoint, SweepResult
from kneepoint.run.folder import RunFolder
from kneepoint.run.progress import Progress
from kneepoint.sim.engine import EngineRefusedError

log = structlog.get_logger(__name__)
T = TypeVar("T")

SCREEN_MIN_POINTS = 3
CLIMB = 4
"""Rates a leg may add above its range when the range never reached its knee."""


@dataclass
class Bench:
    study: StudySpec
    folder: RunFolder
    progress: Progress
    launches: int = 0
    """Servers this agent has started (the simulator's injected faults pick by it)."""

    def retrying(
        self, what: str, attempt: Callable[[], tuple[T, float]]
    ) -> tuple[T, float, tuple[str, ...]]:
        """``attempt`` again on a fresh server after a transient failure (the study's retries)."""
        return retrying(what, attempt, self.study.tuning.transient_retries, self.progress)

    @contextmanager
    def session(
        self, config: EngineConfig, trial_dir: Path, label: str, seconds: float
    ) -> Iterator[tuple[Prober, Target]]:
        """The backend serving ``config``; every point it measures is kept under ``label``."""

        def keep(artifacts: PointArtifacts) -> None:
            self.folder.keep_point(trial_dir, label, artifacts)

        target: Target | None = None
        self.launches += 1
        size = PointSize.for_study(self.study, seconds)
        try:
            with open_target(
                self.study, config, trial_dir, size, keep, launch=self.launches
            ) as target:
                yield self._reporting(target.probe, label), target
        except ServerFailedError as exc:
            spent = target.clock.seconds() if target is not None else 0.0
            raise TrialFailedError(
                FAILURE_STATUS[exc.failure.kind], str(exc.failure), spent
            ) from exc
        except (EngineRefusedError, UnmodeledSettingError) as exc:
            raise TrialFailedError("startup_failed", str(exc), 0.0) from exc

    def _reporting(self, probe: Prober, label: str) -> Prober:
        def reported(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
            point = probe(rate, repeat, attempt)
            self.progress.point(label, rate, repeat, point)
            return point

        return reported

    def knee(self, config: EngineConfig, trial_dir: Path) -> tuple[SweepResult, float]:
        """A coarse knee search for a configuration whose knee is unknown."""
        tuning = self.study.tuning

        def attempt() -> tuple[SweepResult, float]:
            self.progress.sweep("knee", None)
            with self.session(config, trial_dir, "knee", tuning.screen_seconds) as (
                probe,
                target,
            ):
                result = study_knee_search(probe, self.study, config)
            return result, target.clock.seconds()

        return self._kept(trial_dir, "knee", *self.retrying("knee search", attempt))

    def _kept(
        self,
        trial_dir: Path,
        label: str,
        result: SweepResult,
        seconds: float,
        retried: tuple[str, ...],
    ) -> tuple[SweepResult, float]:
        """The sweep with the causes of its failed attempts, kept in the trial's folder."""
        result = result.model_copy(update={"retried": retried}) if retried else result
        self.folder.keep_sweep(trial_dir, label, result)
        return result, seconds

    def repeats(
        self,
        config: EngineConfig,
        trial_dir: Path,
        rates: list[float],
        reference: Sequence[SweepPoint],
        repeats: range,
    ) -> tuple[SweepResult, float]:
        """One configuration over ``rates``, ``repeats`` on one server: its capacity and its
        noise (``reference``: its points measured before, its knee search's, which these must
        not contradict without a retake)."""
        tuning, label = self.study.tuning, "repeats"

        def attempt() -> tuple[SweepResult, float]:
            legs: list[SweepResult] = []
            self.progress.sweep(label, len(repeats) * len(rates))
            with self.session(config, trial_dir, label, tuning.validate_seconds) as (
                probe,
                target,
            ):
                for repeat in repeats:
                    earlier = [*reference, *(p for leg in legs for p in leg.points)]
                    legs.append(
                        sweep.measure_rates(
                            probe,
                            config,
                            self.study.slo,
                            rates,
                            repeat=repeat,
                            climb=self.climb,
                            descend=self.descend,
                            retakes=self.retakes,
                            reference=earlier,
                        )
                    )
            return sweep.merge(legs), target.clock.seconds()

        kept = label if repeats.start == 0 else f"{label}-r{repeats.start}"
        return self._kept(trial_dir, kept, *self.retrying("repeats", attempt))

    @property
    def climb(self) -> int:
        """Rates a sweep may add above its range (none for an objective that does not climb)."""
        return CLIMB if rules(self.study.objective).climbs else 0

    @property
    def descend(self) -> int:
        """Rates a sweep may add below its range where its lowest failed (an objective that
        is the SLO knee only: past the knee is where a peak-throughput leg belongs)."""
        return CLIMB if rules(self.study.objective).is_capacity else 0

    @property
    def retakes(self) -> int:
        """Times a point that cannot tell is measured again."""
        return self.study.measurement.retakes

    def measure(
        self, config: EngineConfig, trial_dir: Path, rates: list[float], label: str
    ) -> tuple[SweepResult, float]:
        """One configuration at ``rates``, once (a screen that needs no knee)."""

        def attempt() -> tuple[SweepResult, float]:
            self.progress.sweep(label, len(rates))
            with self.session(config, trial_dir, label, self.study.tuning.screen_seconds) as (
                probe,
                target,
            ):
                result = sweep.measure_rates(
                    probe,
                    config,
                    self.study.slo,
                    rates,
                    kind="screen",
                    climb=self.climb,
                    descend=self.descend,
                    retakes=self.retakes,
                )
            return result, target.clock.seconds()

        return self._kept(trial_dir, label, *self.retrying(label, attempt))

    def screen(
        self, config: EngineConfig, trial_dir: Path, around_rps: float
    ) -> tuple[SweepResult, float]:
        """The cheap look: a few rates around the incumbent's knee under a hard device-time cap;
        a challenger that passes them all is followed up until it fails (within the cap)."""
        tuning = self.study.tuning
        # Three points must fit under the cap, or the screen answers nothing: long requests
        # need long points (see kneepoint.load.settle), whatever the cap says.
        size = PointSize.for_study(self.study, tuning.screen_seconds)
        point_s = max(size.seconds, size.settle_s) + size.warmup_s
        cap = max(tuning.screen_time_cap_s, SCREEN_MIN_POINTS * point_s)
        if cap > tuning.screen_time_cap_s:
            log.info("screen.cap_raised", cap_s=round(cap), point_s=round(point_s))
        retried = self.retrying("screen", lambda: self._screen(config, trial_dir, around_rps, cap))
        return self._kept(trial_dir, "screen", *retried)

    def _screen(
        self, config: EngineConfig, trial_dir: Path, around_rps: float, cap: float
    ) -> tuple[SweepResult, float]:
        slo = self.study.slo
        self.progress.sweep("screen", len(sweep.SCREEN_FRACTIONS))
        with self.session(config, trial_dir, "screen", self.study.tuning.screen_seconds) as (
            probe,
            target,
        ):
            # the cap is on the server's time: a wider server spends device time faster
            # (every GPU counts in the budget) but needs as long per point
            gpus = config.tensor_parallel_size or 1

            def clock() -> float:
                return target.clock.seconds() / gpus

            first = sweep.screen(
                probe, config, slo, around_rps, time_cap_s=cap, clock=clock, retakes=self.retakes
            )
            legs = [first]
            left = cap - first.elapsed_s
            passes = [p.rate_rps for p in first.points if p.passed]
            if not any(p.failed for p in first.points) and left > 0 and passes:
                legs.append(
                    sweep.knee_search(
                        probe,
                        config,
                        slo,
                        max(passes) * 1.25,
                        time_cap_s=left,
                        clock=clock,
                        retakes=self.retakes,
                        max_rps=self.study.tuning.max_rate_rps,
                        passing_rps=max(passes),
                    )
                )
        return sweep.merge(legs, kind="screen"), target.clock.seconds()

    def burst(
        self, config: EngineConfig, trial_dir: Path, plan: Sequence[PlannedRequest], rate: float
    ) -> tuple[tuple[RequestRecord, ...], float]:
        """A plan shaped over time (``kneepoint.load.burst``) sent to ``config`` as one load."""

        def attempt() -> tuple[tuple[RequestRecord, ...], float]:
            self.progress.sweep("burst", None)
            with self.session(config, trial_dir, "burst", self.study.tuning.validate_seconds) as (
                _,
                target,
            ):
                if target.send is None:
                    raise TrialFailedError("startup_failed", "the backend cannot send a plan", 0)
                records = target.send(plan, rate)
            return records, target.clock.seconds()

        records, seconds, _ = self.retrying("burst", attempt)
        return records, seconds
