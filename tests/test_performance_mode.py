"""vLLM's intent flag, ``--performance-mode``: rendered as vLLM takes it, resolved as vLLM
resolves it (throughput doubles the batch limits left to their defaults), priced as the
doublings it makes, offered only where the installed vLLM knows it, and measured by the
simulator through the same defaults."""

from __future__ import annotations

from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.physics import resolve_engine
from kneepoint.records.engine import EngineConfig
from tests.support.pruned import run
from tests.support.readings import A100, CAPPED, COMPUTE, LLAMA_1B

H100, LLAMA_8B = gpu_catalogue()["h100-sxm"], model_catalogue()["llama-3.1-8b"]


def _price(pruning: object) -> float | str:
    """performance_mode's predicted ratio as a candidate, or why it was ruled out."""
    for c in pruning.candidates:  # type: ignore[attr-defined]
        if c.knob.name == "performance_mode":
            assert c.target == "throughput"
            return float(c.predicted_ratio)
    return next(r.reason for r in pruning.ruled_out if r.knob == "performance_mode")  # type: ignore[attr-defined]


def test_the_mode_renders_as_its_flag() -> None:
    config = EngineConfig(model="m", performance_mode="throughput")
    assert config.serve_argv() == ["vllm", "serve", "m", "--performance-mode", "throughput"]


def test_throughput_doubles_only_the_limits_left_to_their_defaults() -> None:
    def limits(**knobs: object) -> tuple[int, int]:
        resolved = resolve_engine(EngineConfig(model="m", **knobs), H100, LLAMA_8B)  # type: ignore[arg-type]
        return resolved.max_num_seqs, resolved.max_num_batched_tokens

    seqs, tokens = limits()
    assert limits(performance_mode="throughput") == (2 * seqs, 2 * tokens)
    assert limits(performance_mode="throughput", max_num_seqs=64) == (64, 2 * tokens)
    assert limits(performance_mode="interactivity") == (seqs, tokens)
    assert limits(performance_mode="balanced") == (seqs, tokens)


def test_where_the_default_cap_binds_throughput_is_priced_as_doubling_it() -> None:
    # A 1B model on an A100 pinned at its default running cap (256) with KV nearly empty:
    # the cap's own rule prices doubling it; the mode doubles it too, where it is unset.
    capped = {**CAPPED, "running_mean": 255.0}
    mode, _ = run("scheduling", capped, gpu=A100, model=LLAMA_1B, kind="admission_cap")
    cap, _ = run("scheduling", capped, gpu=A100, model=LLAMA_1B, kind="admission_cap",
                 engine={"max_num_seqs": 256})  # fmt: skip
    seqs = next(c for c in cap.candidates if c.knob.name == "max_num_seqs")
    assert _price(mode) == seqs.predicted_ratio > 1.02
    set_both = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    fixed, _ = run("scheduling", capped, gpu=A100, model=LLAMA_1B, kind="admission_cap",
                   engine=set_both)  # fmt: skip
    assert "both set: throughput mode doubles only their defaults" in str(_price(fixed))


def test_it_is_offered_only_where_the_installed_vllm_knows_it() -> None:
    old, _ = run("compute", COMPUTE, vllm_version="0.16.1")
    assert "does not know --performance-mode (needs >=0.17.0)" in str(_price(old))
    new, _ = run("compute", COMPUTE, vllm_version="0.17.0")
    assert "does not know" not in str(_price(new))
