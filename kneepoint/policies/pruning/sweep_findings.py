"""What one sweep of a configuration says, pure: what binds there (the diagnosis) and the
knobs worth trying for it (the pruning). ``kneepoint tune`` reads every baseline and promoted
configuration this way; ``kneepoint diagnose`` reads a server it measured, or a recording."""

from __future__ import annotations

from kneepoint.policies.diagnosis import context_of, diagnose, observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.records import (
    AcceptanceProbe,
    Diagnosis,
    EngineConfig,
    KnobCatalogue,
    Pruning,
    StudySpec,
    SweepResult,
    VllmBackend,
)


def findings(
    study: StudySpec,
    config: EngineConfig,
    result: SweepResult,
    catalogue: KnobCatalogue,
    vllm_version: str | None = None,
    *,
    acceptance: AcceptanceProbe | None = None,
) -> tuple[Diagnosis, Pruning]:
    """What binds on ``config`` and the knobs worth trying, from one observation of
    ``result`` (``vllm_version``: the release the server runs, else the one the study states;
    ``acceptance``: the run's acceptance probe, which prices speculation).
    An attached server's knobs are advice for whoever runs it: judged as the vLLM server it
    is, though kneepoint cannot change them."""
    context = context_of(observe_study(study, config, result, acceptance))
    diagnosis = diagnose(context)
    backend = study.backend
    version = backend.stated_vllm_version if vllm_version is None else vllm_version
    if not backend.owns_knobs:
        backend = VllmBackend(vllm_version=version)
    pruning = prune(
        diagnosis,
        context,
        catalogue,
        allowed=study.search.knobs,
        vllm_version=version,
        backend=backend,
        gpus=study.gpus,
    )
    return diagnosis, pruning
