"""Validation: the incumbent and a challenger measured in turn, each over the full range around
its own knee, for each repeat, interleaved A B / B A by repeat so that drift in the machine
and start-up variance hit both arms alike; each leg on a server of its own, so one GPU is
enough."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from kneepoint.load import merge
from kneepoint.measure.bench import Bench, keep_sweep
from kneepoint.measure.trial_failure import TrialFailedError
from kneepoint.probes.backends import Prober, Target
from kneepoint.records import EngineConfig, SweepPoint, SweepResult


def validate_pair(
    bench: Bench,
    incumbent: EngineConfig,
    challenger: EngineConfig,
    trial_dir: Path,
    *,
    rates: dict[str, list[float]],
    repeats: range,
    known: Mapping[str, Sequence[SweepPoint]] | None = None,
) -> tuple[SweepResult, SweepResult, float]:
    """Both arms, each over the full range around its own knee (``rates`` by arm), for
    each repeat, interleaved A B / B A by repeat (``known``: each arm's points measured
    before, which its legs must not contradict without a retake)."""
    arms = {"incumbent": incumbent, "challenger": challenger}
    legs: dict[str, list[SweepResult]] = {"incumbent": [], "challenger": []}
    spent = 0.0
    total = len(repeats) * sum(len(r) for r in rates.values())
    bench.progress.sweep("validate", total)
    for repeat in repeats:
        order = list(arms) if repeat % 2 == 0 else list(arms)[::-1]
        for arm in order:
            label = f"validate-{arm}"
            before = [p.model_copy(update={"arm": arm}) for p in (known or {}).get(arm, ())]
            earlier = [*before, *(p for leg in legs[arm] for p in leg.points)]
            where = (trial_dir, label, bench.study.tuning.validate_seconds)
            one_leg = functools.partial(
                _leg, bench, arms[arm], rates[arm], repeat=repeat, arm=arm, earlier=earlier
            )
            try:
                measured, seconds, retried = bench.on_server(
                    label, arms[arm], where, one_leg, planned=len(rates[arm])
                )
            except TrialFailedError as exc:
                exc.device_s += spent
                raise
            legs[arm].append(measured.model_copy(update={"retried": retried}))
            spent += seconds
    results = {arm: merge(legs[arm]) for arm in arms}
    for arm, result in results.items():
        keep_sweep(trial_dir, f"validate-{arm}-r{repeats.start}", result)
    return results["incumbent"], results["challenger"], spent


def _leg(
    bench: Bench,
    config: EngineConfig,
    rates: list[float],
    probe: Prober,
    _: Target,
    *,
    repeat: int,
    arm: str,
    earlier: Sequence[SweepPoint] = (),
) -> SweepResult:
    """One arm of one validation repeat, on its own server (``earlier``: the arm's points
    from the repeats before, which its points must not contradict without a retake)."""
    return bench.at(probe, config, rates, repeat=repeat, arm=arm, reference=earlier)
