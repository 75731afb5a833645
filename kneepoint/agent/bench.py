"""The loop's measuring hand: each kind of sweep the loop asks for, on the study's backend,
with every point's records kept in the trial's folder and the device time it cost.

A server that will not start, dies or hangs becomes a ``TrialFailedError`` carrying the trial
status it means and the device time already spent; the loop records it as an outcome.
Validation restarts the two servers in turn for every repeat (A B, then B A), so drift in the
machine and start-up variance hit both arms alike, and one GPU is enough.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from kneepoint.agent.progress import Progress
from kneepoint.agent.rates import climbs
from kneepoint.agent.run_folder import RunFolder
from kneepoint.load.plan import PlannedRequest
from kneepoint.physics.defaults import UnmodeledSettingError
from kneepoint.probes import sweep
from kneepoint.probes.process import FailureKind, ServerFailedError
from kneepoint.probes.study_knee import study_knee_search
from kneepoint.probes.sweep_run import Prober
from kneepoint.probes.targets import PointArtifacts, PointSize, Target, open_target
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint
from kneepoint.records.measure import RequestRecord
from kneepoint.records.proposal import TrialStatus
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepPoint, SweepResult
from kneepoint.sim.engine import EngineRefusedError

log = structlog.get_logger(__name__)
_STATUS: dict[FailureKind, TrialStatus] = {
    "startup_oom": "startup_failed",
    "bad_argument": "startup_failed",
    "not_started": "startup_failed",
    "crashed": "crashed",
    "hung": "timed_out",
    "timed_out": "timed_out",
    "unreachable": "crashed",
    "wrong_server": "startup_failed",
}


TRANSIENT: frozenset[TrialStatus] = frozenset({"crashed", "timed_out"})
"""Failures worth a fresh server: a crash or a hang mid-sweep. A refused start is not."""
T = TypeVar("T")

SCREEN_MIN_POINTS = 3
CLIMB = 4
"""Rates a leg may add above its range when the range never reached its knee."""


class TrialFailedError(RuntimeError):
    def __init__(self, status: TrialStatus, cause: str, device_s: float) -> None:
        super().__init__(f"{status}: {cause}")
        self.status, self.cause, self.device_s = status, cause, device_s


@dataclass
class Bench:
    study: StudySpec
    folder: RunFolder
    progress: Progress
    launches: int = 0
    """Servers this agent has started (the simulator's injected faults pick by it)."""

    def _retrying(
        self, what: str, attempt: Callable[[], tuple[T, float]]
    ) -> tuple[T, float, tuple[str, ...]]:
        """``attempt`` re-run on a fresh server after a transient failure, up to
        ``tuning.transient_retries`` times: its result, the device time of every attempt,
        and why the failed ones ended. A failure that is not transient, or the last one, is
        raised with the earlier causes and all the time spent."""
        spent, retries = 0.0, self.study.tuning.transient_retries
        causes: list[str] = []
        for tries in range(retries + 1):
            try:
                result, seconds = attempt()
            except TrialFailedError as exc:
                spent += exc.device_s
                if exc.status not in TRANSIENT or tries == retries:
                    cause = "; ".join([*(f"first {c}" for c in causes[:1]), exc.cause])
                    raise TrialFailedError(exc.status, cause, spent) from exc
                causes.append(f"{exc.status}: {exc.cause}")
                log.warning(
                    "bench.retry",
                    what=what,
                    status=exc.status,
                    cause=exc.cause,
                    attempt=tries + 1,
                    retries=retries,
                )
                self.progress.status(
                    f"{what}: server {exc.status} ({exc.cause}); again on a fresh server"
                )
                continue
            return result, seconds + spent, tuple(causes)
        raise AssertionError("unreachable: the last attempt returns or raises")

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
            raise TrialFailedError(_STATUS[exc.failure.kind], str(exc.failure), spent) from exc
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

        return self._kept(trial_dir, "knee", *self._retrying("knee search", attempt))

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
        reference: Sequence[SweepPoint] = (),
    ) -> tuple[SweepResult, float]:
        """One configuration over ``rates``, repeated: its capacity and its noise
        (``reference``: its points measured before, its knee search's, which these must not
        contradict without a retake)."""
        tuning, label = self.study.tuning, "repeats"

        def attempt() -> tuple[SweepResult, float]:
            legs: list[SweepResult] = []
            self.progress.sweep(label, tuning.validate_repeats * len(rates))
            with self.session(config, trial_dir, label, tuning.validate_seconds) as (
                probe,
                target,
            ):
                for repeat in range(tuning.validate_repeats):
                    earlier = [*reference, *(p for leg in legs for p in leg.points)]
                    legs.append(
                        sweep.measure_rates(
                            probe,
                            config,
                            self.study.slo,
                            rates,
                            repeat=repeat,
                            climb=self._climb,
                            retakes=self._retakes,
                            reference=earlier,
                        )
                    )
            return sweep.merge(legs), target.clock.seconds()

        return self._kept(trial_dir, label, *self._retrying("repeats", attempt))

    @property
    def _climb(self) -> int:
        return CLIMB if climbs(self.study.objective) else 0

    @property
    def _retakes(self) -> int:
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
                    climb=self._climb,
                    retakes=self._retakes,
                )
            return result, target.clock.seconds()

        return self._kept(trial_dir, label, *self._retrying(label, attempt))

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
        retried = self._retrying("screen", lambda: self._screen(config, trial_dir, around_rps, cap))
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
                probe, config, slo, around_rps, time_cap_s=cap, clock=clock, retakes=self._retakes
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
                        retakes=self._retakes,
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

        records, seconds, _ = self._retrying("burst", attempt)
        return records, seconds

    def validate(
        self,
        incumbent: EngineConfig,
        challenger: EngineConfig,
        trial_dir: Path,
        rates: dict[str, list[float]],
        repeats: range,
        *,
        known: Mapping[str, Sequence[SweepPoint]] | None = None,
    ) -> tuple[SweepResult, SweepResult, float]:
        """Both arms, each over the full range around its own knee (``rates`` by arm), for
        each repeat, interleaved A B / B A by repeat (``known``: each arm's points measured
        before, which its legs must not contradict without a retake)."""
        arms = {"incumbent": incumbent, "challenger": challenger}
        legs: dict[str, list[SweepResult]] = {"incumbent": [], "challenger": []}
        spent = 0.0
        total = len(repeats) * sum(len(r) for r in rates.values())
        self.progress.sweep("validate", total)
        for repeat in repeats:
            order = list(arms) if repeat % 2 == 0 else list(arms)[::-1]
            for arm in order:
                label = f"validate-{arm}"
                before = [p.model_copy(update={"arm": arm}) for p in (known or {}).get(arm, ())]
                earlier = [*before, *(p for leg in legs[arm] for p in leg.points)]
                attempt = functools.partial(
                    self._leg, arms[arm], trial_dir, rates[arm], repeat, arm, earlier=earlier
                )
                try:
                    leg, seconds, retried = self._retrying(label, attempt)
                except TrialFailedError as exc:
                    exc.device_s += spent
                    raise
                legs[arm].append(leg.model_copy(update={"retried": retried}))
                spent += seconds
        results = {arm: sweep.merge(legs[arm]) for arm in arms}
        for arm, result in results.items():
            self.folder.keep_sweep(trial_dir, f"validate-{arm}-r{repeats.start}", result)
        return results["incumbent"], results["challenger"], spent

    def _leg(
        self,
        config: EngineConfig,
        trial_dir: Path,
        rates: list[float],
        repeat: int,
        arm: str,
        *,
        earlier: Sequence[SweepPoint] = (),
    ) -> tuple[SweepResult, float]:
        """One arm of one validation repeat, on its own server (``earlier``: the arm's points
        from the repeats before, which its points must not contradict without a retake)."""
        label = f"validate-{arm}"
        self.progress.sweep(label, len(rates))
        with self.session(config, trial_dir, label, self.study.tuning.validate_seconds) as (
            probe,
            target,
        ):
            leg = sweep.measure_rates(
                probe,
                config,
                self.study.slo,
                rates,
                repeat=repeat,
                arm=arm,
                climb=self._climb,
                retakes=self._retakes,
                reference=earlier,
            )
        return leg, target.clock.seconds()
