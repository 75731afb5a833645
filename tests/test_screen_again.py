"""A screen whose every point the host voided is measured again on a new server before the
trial is judged; one that tells, or one the configuration failed, is not; two that cannot
tell say why in the trial's reason (the console prints it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kneepoint.config import knob_catalogue, load_study
from kneepoint.load import read_sweep
from kneepoint.load.point import load_point
from kneepoint.measure.progress import LogProgress
from kneepoint.records import (
    EngineConfig,
    Prediction,
    Proposal,
    Screened,
    StudySpec,
    SweepPoint,
    SweepResult,
)
from kneepoint.records.loadpoint import Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.run import RunFolder
from kneepoint.tune.steps import SCREEN_ATTEMPTS, Steps

from .conftest import SMALL

BUSY = Signals(host_cpu_pressure=0.6, host_cpu_others_cores=1.2)
QUIET = Signals(host_cpu_pressure=0.02, host_cpu_others_cores=0.01)


Look = list[tuple[float, Signals, float]]
"""A sweep's points as (rate in req/s, the host's signals over it, every request's TTFT in s)."""


def _sweep(study: StudySpec, config: EngineConfig, look: Look) -> SweepResult:
    """The sweep ``look`` gives under ``study``'s SLO (TTFT p99 1 s: 2 s misses it)."""
    points = []
    for rate, signals, ttft_s in look:
        records = [
            RequestRecord(index=i, traffic_class="short", scheduled_s=i * 0.1, sent_s=i * 0.1,
                          chunk_times_s=(i * 0.1 + ttft_s, i * 0.1 + ttft_s + 0.01),
                          end_s=i * 0.1 + ttft_s + 0.01, prompt_tokens=8, output_tokens=2)
            for i in range(100)
        ]  # fmt: skip
        point = load_point(rate, records, study.slo, signals=signals)
        points.append(SweepPoint(rate_rps=rate, margin=ttft_s, point=point))
    return read_sweep(points, "screen", config)


class _Screens:
    """A bench whose screens come back as scripted, 30 device-seconds each."""

    def __init__(self, study: StudySpec, screens: Sequence[Look]) -> None:
        self.study, self.screens, self.progress = study, list(screens), LogProgress()

    def screen(
        self, config: EngineConfig, trial_dir: Path, around_rps: float
    ) -> tuple[SweepResult, float]:
        return _sweep(self.study, config, self.screens.pop(0)), 30.0


def _screened(tmp_path: Path, *screens: Look) -> tuple[Screened, int]:
    """The trial's screen over the scripted ``screens``, and how many of them it asked for."""
    study = load_study(SMALL)
    bench = _Screens(study, screens)
    steps = Steps(study, RunFolder(tmp_path), bench, knob_catalogue())  # type: ignore[arg-type]
    config = study.engine.model_copy(update={"max_num_seqs": 64})
    guess = Prediction(capacity_ratio=1.2, reason="test")
    proposal = Proposal(
        config=config, changes={"max_num_seqs": 64}, proposer="coordinate", reason="test",
        prediction=guess,
    )  # fmt: skip
    incumbent = _sweep(study, study.engine, [(10.0, QUIET, 0.1), (12.0, QUIET, 2.0)])
    screened = steps.screen(1, proposal, 10.0, incumbent)
    return screened, len(screens) - len(bench.screens)


def test_a_screen_the_host_voided_is_measured_again(tmp_path: Path) -> None:
    voided = [(10.0, BUSY, 0.1), (9.0, BUSY, 0.1)]
    told = [(10.0, QUIET, 0.1), (12.0, QUIET, 0.1), (14.0, QUIET, 2.0)]
    screened, asked = _screened(tmp_path, voided, told)
    assert asked == 2
    assert screened.outcome.status == "ok" and screened.device_s == 60.0


def test_a_screen_that_tells_or_that_the_configuration_failed_is_not(tmp_path: Path) -> None:
    failed = [(10.0, QUIET, 2.0), (9.0, QUIET, 2.0)]
    screened, asked = _screened(tmp_path, failed)
    assert asked == 1 and screened.outcome.status == "infeasible"


def test_screens_that_never_tell_say_why_in_the_reason(tmp_path: Path) -> None:
    voided = [(10.0, BUSY, 0.1)]
    screened, asked = _screened(tmp_path, *[voided] * SCREEN_ATTEMPTS)
    assert asked == SCREEN_ATTEMPTS
    assert screened.outcome.status == "invalid_measurement"
    assert "the host is busy" in screened.reason
