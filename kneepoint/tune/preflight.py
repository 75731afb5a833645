"""A trial refused before any server starts: the memory model says vLLM would not start it."""

from __future__ import annotations

from kneepoint.physics import UnmodeledSettingError, plan_memory, resolve_engine
from kneepoint.records import Outcome, Proposal, Screened, StudySpec


def preflight(study: StudySpec, trial: int, proposal: Proposal) -> Screened | None:
    """vLLM's refusal of ``proposal`` as the memory model words it (None: it would start, or
    the backend's GPU entry does not describe its device)."""
    if not study.backend.checks_memory:
        return None
    try:
        engine = resolve_engine(proposal.config, study.gpu, study.model)
    except UnmodeledSettingError as exc:
        refusal = f"not modelled: {exc}"
    else:
        plan = plan_memory(study.gpu, study.model, engine)
        if plan.refusal is None:
            return None
        refusal = plan.refusal.message
    outcome = Outcome(status="startup_failed", detail=f"preflight: {refusal}")
    return Screened(trial=trial, outcome=outcome, reason=f"preflight refused: {refusal}")
