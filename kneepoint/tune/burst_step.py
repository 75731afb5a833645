"""The burst check the winner gets once the search has finished (``kneepoint.load.burst``):
at the rate a fleet runs each replica at its peak (its SLO capacity's lower end less the
fleet's headroom; the fixed rate for goodput at a rate), a burst of ``tuning.burst.factor``
times that rate, then back; the event says how long TTFT took to come back within the SLO."""

from __future__ import annotations

from pathlib import Path

from kneepoint.config import workload_trace
from kneepoint.load import (
    BurstPlan,
    PointSize,
    burst_plan,
    recovery_s,
    rules,
    ttft_limits,
    window_s,
    windows,
)
from kneepoint.measure import Bench, TrialFailedError
from kneepoint.records import BurstChecked, EngineConfig, Finished, StudySpec, SweepResult

BUDGET_STOPS = ("max_device_hours", "deadline")
"""Stops after which nothing more is measured: the budget the person set is spent."""


def operating_rps(study: StudySpec, repeats: SweepResult) -> float | None:
    return rules(study.objective).operating_rps(repeats, study.fleet.headroom)


def unmeasured(study: StudySpec, config: EngineConfig, skipped: str = "") -> BurstChecked:
    """The check of ``config`` before anything is measured (``skipped``: why nothing will be)."""
    spec = study.tuning.burst
    return BurstChecked(
        config=config,
        operating_rps=0.0,
        burst_rps=0.0,
        burst_s=spec.seconds,
        recover_within_s=spec.recover_within_s,
        skipped=skipped,
    )


def burst_skipped(study: StudySpec, repeats: SweepResult, finished: Finished) -> str:
    """Why the winner's burst check measures nothing, from what the run knows without a
    server (a pool records it without placing a step); "" where it measures."""
    limits = ttft_limits(study.slo, study.workload.class_names())
    return (
        "tuning.burst.enabled is false"
        if not study.tuning.burst.enabled
        else f"the run stopped on its budget ({finished.reason})"
        if finished.reason in BUDGET_STOPS
        else "the SLO has no TTFT limit to recover within"
        if not limits
        else "the winner has no SLO capacity to operate below"
        if operating_rps(study, repeats) is None
        else ""
    )


def check_burst(
    bench: Bench,
    trial_dir: Path,
    config: EngineConfig,
    repeats: SweepResult,
    finished: Finished,
) -> BurstChecked:
    """``trial_dir``: where the check's server and points go (not under trials/, which
    holds the search's)."""
    study = bench.study
    spec = study.tuning.burst
    base = unmeasured(study, config)
    limits = ttft_limits(study.slo, study.workload.class_names())
    rate = operating_rps(study, repeats)
    skipped = burst_skipped(study, repeats, finished)
    if skipped or rate is None:
        return base.model_copy(update={"skipped": skipped})
    plan = _plan(study, rate)
    trial_dir.mkdir(parents=True, exist_ok=True)
    try:
        records, device_s = bench.burst(config, trial_dir, plan.requests, rate)
    except TrialFailedError as exc:
        return base.model_copy(
            update={"skipped": f"the server failed: {exc}", "device_s": exc.device_s}
        )
    found = windows(records, limits, rate, plan.burst_end_s)
    return base.model_copy(
        update={
            "operating_rps": rate,
            "burst_rps": rate * spec.factor,
            "windows": tuple(found),
            "recovery_s": recovery_s(found),
            "device_s": device_s,
        }
    )


def _plan(study: StudySpec, rate: float) -> BurstPlan:
    spec = study.tuning.burst
    size = PointSize.for_study(study, study.tuning.validate_seconds)
    settle = max(size.settle_s, size.warmup_s, 10.0)
    # the stretch after the burst runs past the recovery limit by two windows, so a recovery
    # at the limit is seen to hold
    after = spec.recover_within_s + 2 * window_s(rate)
    return burst_plan(
        study.workload,
        rate,
        spec.factor,
        settle_s=settle,
        burst_s=spec.seconds,
        after_s=after,
        vocab_size=study.model.vocab_size,
        seed=study.workload.seed + 1000,
        trace=workload_trace(study.workload),
    )
