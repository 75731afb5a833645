"""NVFP4 checkpoints (`--quantization modelopt_fp4`): 4.5 bits a weight (E2M1 values, one E4M3
scale per 16), W4A4 GEMMs on Blackwell's FP4 tensor cores (B200 9, GB200 10 PFLOP/s dense),
weight-only through vLLM's FP4 Marlin kernel on older NVIDIA GPUs, refused elsewhere; the plan
offers the format where the GPU has FP4 cores, and pruning says what one would give."""

from __future__ import annotations

import pytest

from kneepoint.config import gpu_catalogue, model_catalogue
from kneepoint.config.catalog import knob_catalogue
from kneepoint.physics.defaults import UnmodeledSettingError, resolve_engine
from kneepoint.physics.gemm import LinearGemm
from kneepoint.physics.memory import plan_memory
from kneepoint.physics.quantization import NVFP4_BYTES_PER_WEIGHT, checkpoint_of, scheme_for
from kneepoint.planning.layouts import weight_options
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig
from tests.support.pruned import run
from tests.support.readings import CACHE

GPUS = gpu_catalogue()
LLAMA_8B = model_catalogue()["llama-3.1-8b"]
FP4_ID, BF16_ID = "nvidia/Llama-3.1-8B-Instruct-FP4", "meta-llama/Llama-3.1-8B-Instruct"


def _engine(gpu: str, model_id: str = FP4_ID, **knobs):  # type: ignore[no-untyped-def]
    config = EngineConfig(model=model_id, max_model_len=8192, **knobs)
    return resolve_engine(config, GPUS[gpu], LLAMA_8B)


def test_an_nvfp4_checkpoint_is_told_by_its_name_or_its_flag() -> None:
    assert pytest.approx(4.5 / 8) == NVFP4_BYTES_PER_WEIGHT
    red_hat = "RedHatAI/Llama-3.1-8B-NVFP4"
    for model_id, quantization in ((FP4_ID, None), (red_hat, None), (BF16_ID, "modelopt_fp4"),
                                   (red_hat, "compressed-tensors")):  # fmt: skip
        assert checkpoint_of(model_id, quantization) == "nvfp4"
        scheme = scheme_for(model_id, quantization)
        assert scheme is not None and scheme.gemm == "fp4"
    # gpt-oss's MXFP4 is another format (32-value blocks, power-of-two scales)
    assert checkpoint_of("openai/gpt-oss-20b-mxfp4", None) is None


def test_blackwell_runs_it_on_fp4_cores_older_nvidia_gpus_weight_only_amd_not_at_all() -> None:
    b200, h100 = _engine("b200"), _engine("h100-sxm")
    assert b200.gemm == "fp4" and h100.gemm == "w4a16"
    assert b200.linear_weight_bytes == h100.linear_weight_bytes == NVFP4_BYTES_PER_WEIGHT
    assert LinearGemm(GPUS["b200"], LLAMA_8B, b200, Efficiency()).peak_tflops == 9000
    assert LinearGemm(GPUS["gb200"], LLAMA_8B, _engine("gb200"), Efficiency()).quantises_activations
    with pytest.raises(UnmodeledSettingError, match="NVIDIA GPUs only"):
        _engine("mi300x")


def test_the_plan_offers_nvfp4_where_the_gpu_has_fp4_cores() -> None:
    def options(gpu: str) -> dict[str, tuple[str, int | None]]:
        config = EngineConfig(model=BF16_ID, max_model_len=8192)
        found = weight_options(GPUS[gpu], LLAMA_8B, config)
        return {o.quantization: (o.needs, o.kv_tokens) for o in found}

    b200 = options("b200")
    needs, fp4_tokens = b200["modelopt_fp4"]
    assert needs == "a checkpoint quantized with NVFP4"
    assert fp4_tokens is not None and fp4_tokens > (b200["fp8"][1] or 0) > (b200["bf16"][1] or 0)
    assert "modelopt_fp4" not in options("h100-sxm")
    # the linear layers' weights shrink 3.6x against bf16, the embedding and the LM head stay
    # bf16 (1.05 of Llama-8B's 8.03 B parameters): 16.1 -> 6.0 GB
    bf16 = plan_memory(GPUS["b200"], LLAMA_8B, _engine("b200", BF16_ID))
    fp4 = plan_memory(GPUS["b200"], LLAMA_8B, _engine("b200"))
    assert bf16.weight_bytes / fp4.weight_bytes == pytest.approx(2.66, abs=0.02)


def test_the_search_never_switches_a_bf16_checkpoint_to_nvfp4_and_says_what_one_would_give() -> (
    None
):
    knob = knob_catalogue().get("quantization")
    assert knob is not None
    nvidia = frozenset({"nvfp4_checkpoint", "marlin_kernels"})
    assert knob.choices_under(nvidia) == (None, "modelopt_fp4")
    found, _ = run("cache", CACHE, gpu=GPUS["b200"])
    candidate = next(c for c in found.candidates if c.knob.name == "quantization")
    assert candidate.knob.domain.choices == (None, "fp8")  # type: ignore[union-attr]
    note = found.notes["quantization"]
    assert "modelopt_fp4 needs an NVFP4 checkpoint" in note and "KV tokens" in note
    found, _ = run("cache", CACHE)  # an H100: no FP4 cores
    assert "no FP4 tensor cores: it would run as AWQ" in found.notes["quantization"]


def test_an_nvfp4_checkpoint_has_nothing_to_switch() -> None:
    found, _ = run("cache", CACHE, gpu=GPUS["b200"], engine={"quantization": "modelopt_fp4"})
    reason = next(r.reason for r in found.ruled_out if r.knob == "quantization")
    assert reason == "the checkpoint is already NVFP4 (4-bit weights and activations)"
