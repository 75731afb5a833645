"""The measuring harness every command measures a configuration through: a fresh server for
the configuration (the study's backend), its points reported and kept, the device time it
cost, and the same measurement again on a fresh server after a transient failure.

A server that will not start, dies or hangs becomes a ``TrialFailedError`` carrying the trial
status it means and the device time already spent (``kneepoint.measure.trial_failure``); the
loop records it as an outcome, ``sweep`` and ``diagnose`` say it in one line. Validation's
interleaved legs: ``kneepoint.measure.validation``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from kneepoint.load import PlannedRequest, PointSize, merge, rules
from kneepoint.measure import sweep
from kneepoint.measure.progress import Progress
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.measure.trial_failure import FAILURE_STATUS, TrialFailedError, retrying
from kneepoint.measure.watch import Watched
from kneepoint.physics import UnmodeledSettingError
from kneepoint.probes.backends import Keep, Prober, Target, open_target
from kneepoint.probes.server import ServerFailedError
from kneepoint.records import (
    EngineConfig,
    PointArtifacts,
    RequestRecord,
    StudySpec,
    SweepPoint,
    SweepResult,
)
from kneepoint.run import write_atomically, write_point
from kneepoint.sim import EngineRefusedError

log = structlog.get_logger(__name__)
T = TypeVar("T")

SCREEN_MIN_POINTS = 3
CLIMB = 4
"""Rates a leg may add above its range when the range never reached its knee."""


def with_retried(result: SweepResult, retried: tuple[str, ...]) -> SweepResult:
    """The sweep with why its failed attempts ended (``retried``), where any did."""
    return result.model_copy(update={"retried": retried}) if retried else result


def keep_sweep(trial_dir: Path, label: str, result: SweepResult) -> None:
    """A sweep's result beside its points, as ``<label>.json``."""
    write_atomically(trial_dir / f"{label}.json", result.model_dump_json(indent=1) + "\n")


@dataclass
class Bench:
    study: StudySpec
    progress: Progress
    launches: int = 0
    """Servers this agent has started (the simulator's injected faults pick by it)."""
    watched: Watched | None = None
    """The last server's points as they landed: what an interrupted command still writes."""

    @property
    def retries(self) -> int:
        """Fresh servers a transient failure gets: the study's where kneepoint starts the
        server; none for an attached one, which has no fresh server to give."""
        return self.study.tuning.transient_retries if self.study.backend.owns_knobs else 0

    def retrying(
        self, what: str, attempt: Callable[[], tuple[T, float]]
    ) -> tuple[T, float, tuple[str, ...]]:
        """``attempt`` again on a fresh server after a transient failure (the study's retries)."""
        return retrying(what, attempt, self.retries, self.progress)

    def on_server(
        self,
        what: str,
        config: EngineConfig,
        where: tuple[Path, str, float],
        body: Callable[[Prober, Target], T],
        *,
        planned: int | None = None,
        keep: Keep | None = None,
    ) -> tuple[T, float, tuple[str, ...]]:
        """``body`` on a server of ``config``, again on a fresh one after a transient failure:
        its answer, the device time of every attempt and why the failed ones ended. ``where``:
        the server's folder, the label its points are kept under and their seconds of
        arrivals; ``planned``: the points it plans, told to the progress; ``keep``: where each
        point's artifacts go instead of the server's folder."""
        trial_dir, label, seconds = where

        def attempt() -> tuple[T, float]:
            self.progress.sweep(label, planned)
            with self.session(config, trial_dir, label, seconds, keep) as (probe, target):
                answer = body(probe, target)
            return answer, target.clock.seconds()

        return self.retrying(what, attempt)

    @contextmanager
    def session(
        self,
        config: EngineConfig,
        trial_dir: Path,
        label: str,
        seconds: float,
        keep: Keep | None = None,
    ) -> Iterator[tuple[Prober, Target]]:
        """The backend serving ``config``; every point it measures is reported, and kept
        by ``keep`` or else under ``label`` in the server's ``trial_dir``."""

        def kept(artifacts: PointArtifacts) -> None:
            write_point(trial_dir, label, artifacts)

        target: Target | None = None
        self.launches += 1
        size = PointSize.for_study(self.study, seconds)
        try:
            with open_target(
                self.study, config, trial_dir, size, keep or kept, launch=self.launches
            ) as target:
                self.watched = Watched(target.probe, self.progress, label, self.study.slo)
                yield self.watched, target
        except ServerFailedError as exc:
            spent = target.clock.seconds() if target is not None else exc.held_s
            raise TrialFailedError(
                FAILURE_STATUS[exc.failure.kind],
                str(exc.failure),
                spent,
                sentence=exc.failure.sentence(),
            ) from exc
        except (EngineRefusedError, UnmodeledSettingError) as exc:
            raise TrialFailedError("startup_failed", str(exc), 0.0) from exc

    def knee(
        self, config: EngineConfig, trial_dir: Path, start_rps: float | None = None
    ) -> tuple[SweepResult, float]:
        """A coarse knee search for a configuration whose knee is unknown."""

        def search(probe: Prober, _: Target) -> SweepResult:
            return study_knee_search(probe, self.study, config, start_rps=start_rps)

        where = (trial_dir, "knee", self.study.tuning.screen_seconds)
        return self._kept(trial_dir, "knee", *self.on_server("knee search", config, where, search))

    def _kept(
        self,
        trial_dir: Path,
        label: str,
        result: SweepResult,
        seconds: float,
        retried: tuple[str, ...],
    ) -> tuple[SweepResult, float]:
        """The sweep with the causes of its failed attempts, kept in the trial's folder."""
        result = with_retried(result, retried)
        keep_sweep(trial_dir, label, result)
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

        def legs(probe: Prober, _: Target) -> SweepResult:
            done: list[SweepResult] = []
            for repeat in repeats:
                earlier = [*reference, *(p for leg in done for p in leg.points)]
                done.append(self.at(probe, config, rates, repeat=repeat, reference=earlier))
            return merge(done)

        where = (trial_dir, "repeats", self.study.tuning.validate_seconds)
        measured = self.on_server("repeats", config, where, legs, planned=len(repeats) * len(rates))
        kept = "repeats" if repeats.start == 0 else f"repeats-r{repeats.start}"
        return self._kept(trial_dir, kept, *measured)

    def at(
        self, probe: Prober, config: EngineConfig, rates: list[float], **how: Any
    ) -> SweepResult:
        """``rates`` measured once by ``probe``, climbing and descending as the objective
        reads (``how``: ``measure_rates``'s repeat, arm, kind and reference, or its climb
        and descent)."""
        how = {"climb": self.climb, "descend": self.descend, "retakes": self.retakes, **how}
        return sweep.measure_rates(probe, config, self.study.slo, rates, **how)

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
        self,
        config: EngineConfig,
        trial_dir: Path,
        rates: list[float],
        label: str,
        *,
        stay: bool = False,
    ) -> tuple[SweepResult, float]:
        """One configuration at ``rates``, once (a screen that needs no knee; ``stay``: at
        those rates alone, as a probe that reads the server rather than its knee)."""

        def once(probe: Prober, _: Target) -> SweepResult:
            stays = {"climb": 0, "descend": 0} if stay else {}
            return self.at(probe, config, rates, kind="screen", **stays)

        where = (trial_dir, label, self.study.tuning.screen_seconds)
        measured = self.on_server(label, config, where, once, planned=len(rates))
        return self._kept(trial_dir, label, *measured)

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

        def capped(probe: Prober, target: Target) -> SweepResult:
            return self._screen(probe, target, config, around_rps, cap)

        where = (trial_dir, "screen", tuning.screen_seconds)
        planned = len(sweep.SCREEN_FRACTIONS)
        measured = self.on_server("screen", config, where, capped, planned=planned)
        return self._kept(trial_dir, "screen", *measured)

    def _screen(
        self, probe: Prober, target: Target, config: EngineConfig, around_rps: float, cap: float
    ) -> SweepResult:
        # the cap is on the server's time: a wider server spends device time faster
        # (every GPU counts in the budget) but needs as long per point
        gpus = config.gpu_count

        def clock() -> float:
            return target.clock.seconds() / gpus

        slo, retakes = self.study.slo, self.retakes
        first = sweep.screen(
            probe, config, slo, around_rps, time_cap_s=cap, clock=clock, retakes=retakes
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
                    retakes=retakes,
                    max_rps=self.study.tuning.max_rate_rps,
                    passing_rps=max(passes),
                )
            )
        return merge(legs, kind="screen")

    def burst(
        self, config: EngineConfig, trial_dir: Path, plan: Sequence[PlannedRequest], rate: float
    ) -> tuple[tuple[RequestRecord, ...], float]:
        """A plan shaped over time (``kneepoint.load.burst``) sent to ``config`` as one load."""

        def send(_: Prober, target: Target) -> tuple[RequestRecord, ...]:
            if target.send is None:
                raise TrialFailedError("startup_failed", "the backend cannot send a plan", 0)
            return target.send(plan, rate)

        where = (trial_dir, "burst", self.study.tuning.validate_seconds)
        records, seconds, _ = self.on_server("burst", config, where, send)
        return records, seconds
