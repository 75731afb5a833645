"""Pruning over hand-built readings, as the pruning, quantisation, ceiling, prefix-reuse and
backend-contract tests call it: a chat and a RAG workload, and ``run`` (a binding and a signal
set in, the pruning and its observation out)."""

from __future__ import annotations

from typing import Any

from kneepoint.config.catalog import knob_catalogue
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.diagnosis import Diagnosis, Observation
from kneepoint.records.engine import EngineConfig
from kneepoint.records.proposal import Pruning
from kneepoint.records.workload import Workload
from tests.support.readings import H100, LLAMA_8B, point

CATALOGUE = knob_catalogue()
CHAT = Workload.model_validate({
    "name": "chat",
    "classes": [{"name": "c", "input_tokens": {"kind": "fixed", "tokens": 200},
                 "output_tokens": {"kind": "fixed", "tokens": 100}}],
})  # fmt: skip
RAG = Workload.model_validate({
    "name": "rag",
    "prefix_groups": [{"name": "docs", "documents": 20, "prefix_tokens": 2000}],
    "classes": [{"name": "c", "prefix_group": "docs",
                 "input_tokens": {"kind": "fixed", "tokens": 100},
                 "output_tokens": {"kind": "fixed", "tokens": 100}}],
})  # fmt: skip


def run(
    binding: str,
    signals: dict[str, Any],
    *,
    gpu: Any = H100,
    model: Any = LLAMA_8B,
    engine: dict[str, Any] | None = None,
    workload: Workload = CHAT,
    kind: str | None = None,
    **options: Any,
) -> tuple[Pruning, Observation]:
    observation = Observation(
        saturated=point(signals), gpu=gpu, model=model,
        engine=EngineConfig(model=model.name, **(engine or {})), workload=workload,
    )  # fmt: skip
    diagnosis = Diagnosis(binding=binding, confidence=0.9, scheduling_kind=kind)  # type: ignore[arg-type]
    return prune(diagnosis, context_of(observation), CATALOGUE, **options), observation
