"""A screen the memory model says vLLM would refuse starts nothing: it is recorded as a failed
start in vLLM's words, with no device time, where the backend's GPU entry describes its device."""

from __future__ import annotations

from kneepoint.config import load_study
from kneepoint.records.proposal import Prediction, Proposal
from kneepoint.tune.execute import preflight

from .conftest import QUICKSTART


def _proposal(gpu_memory_utilization: float) -> Proposal:
    study = load_study(QUICKSTART)
    config = study.engine.model_copy(update={"gpu_memory_utilization": gpu_memory_utilization})
    return Proposal(config=config, changes={"gpu_memory_utilization": gpu_memory_utilization},
                    proposer="coordinate", reason="synthetic",
                    prediction=Prediction(capacity_ratio=1.1, reason="synthetic"))  # fmt: skip


def test_a_configuration_with_no_room_for_the_kv_cache_is_refused_before_a_launch() -> None:
    study = load_study(QUICKSTART)  # Llama-3.1-8B on an H100: 15 GiB of weights
    refused = preflight(study, 3, _proposal(0.15))
    assert refused is not None and refused.trial == 3 and refused.device_s == 0.0
    assert refused.outcome.status == "startup_failed" and not refused.finalist
    words = "ValueError: No available memory for the cache blocks."  # vLLM's own
    assert refused.reason.startswith(f"preflight refused: {words}")
    assert refused.outcome.detail.startswith(f"preflight: {words}")
    assert preflight(study, 3, _proposal(0.9)) is None


def test_a_backend_whose_gpu_entry_is_not_its_device_is_never_refused_by_the_model() -> None:
    """A vLLM build the catalogue's GPU does not describe (the CPU build) turns it off."""
    study = load_study(QUICKSTART, ["backend={kind: vllm, preflight_memory: false}"])
    assert not study.backend.checks_memory
    assert preflight(study, 3, _proposal(0.15)) is None
