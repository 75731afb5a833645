"""The quality check an output-changing knob's challenger gets before validation: greedy
answers to fixed prompts from the incumbent and the challenger, compared token by token
against ``tuning.quality_threshold``. A server with no real outputs (the simulator, random
weights) cannot be judged so: the check is skipped and says why."""

from __future__ import annotations

import itertools
from pathlib import Path

import structlog

from kneepoint.measure import Bench, TrialFailedError
from kneepoint.probes.client import (
    PROMPTS,
    QualityCheckError,
    greedy_outputs,
    token_agreement,
)
from kneepoint.records import EngineConfig, QualityChecked, StudySpec

log = structlog.get_logger(__name__)


def _no_real_outputs(study: StudySpec, config: EngineConfig) -> str | None:
    """Why greedy outputs of this server would say nothing about quality (None: they would)."""
    if not study.backend.real_outputs:
        return "the simulator has no real model outputs"
    args = config.extra_args
    dummy = any(a == "--load-format=dummy" for a in args) or any(
        a == "--load-format" and b == "dummy" for a, b in itertools.pairwise(args)
    )
    return "the server runs random weights (--load-format dummy)" if dummy else None


def quality_check(
    bench: Bench, trial_dir: Path, trial: int, incumbent: EngineConfig, challenger: EngineConfig
) -> QualityChecked:
    """Greedy answers to fixed prompts from both configurations, compared token by token
    (their servers' logs in ``trial_dir``)."""
    tuning = bench.study.tuning
    threshold = tuning.quality_threshold
    unjudgeable = _no_real_outputs(bench.study, challenger) or _no_real_outputs(
        bench.study, incumbent
    )
    if unjudgeable is not None:
        reason = f"skipped: {unjudgeable}; the change is judged on its measured effect alone"
        log.warning("quality.skipped", trial=trial, reason=reason)
        return QualityChecked(trial=trial, verdict="skipped", threshold=threshold, reason=reason)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(tuning.quality_prompts)]
    outputs, spent = [], 0.0
    for arm, config in (("incumbent", incumbent), ("challenger", challenger)):
        try:
            with bench.session(config, trial_dir, f"quality-{arm}", 1.0) as (_, target):
                assert target.endpoint is not None
                endpoint = target.endpoint
                outputs.append(
                    greedy_outputs(
                        endpoint.url,
                        endpoint.served_model,
                        prompts,
                        tuning.quality_tokens,
                        api_key=endpoint.api_key,
                    )
                )
        except (TrialFailedError, QualityCheckError) as exc:
            reason = f"quality check could not run on the {arm}: {exc}"
            return QualityChecked(
                trial=trial,
                verdict="failed",
                threshold=threshold,
                reason=reason,
                device_s=spent,
            )
        spent += target.clock.seconds()
    agreement = token_agreement(outputs[0], outputs[1])
    passed = agreement >= threshold
    verdict = "accepted" if passed else "rejected"
    reason = (
        f"{agreement:.1%} of greedy tokens match the incumbent's over {len(prompts)} "
        f"prompts (threshold {threshold:.0%}): {verdict}"
    )
    return QualityChecked(
        trial=trial,
        verdict="passed" if passed else "failed",
        agreement=agreement,
        threshold=threshold,
        reason=reason,
        device_s=spent,
    )
