"""`kneepoint plan`: layouts of a model on GPUs before any is rented: memory plans, vLLM's
refusals in its words, the KV pool against real vLLM's, right-sized max_model_len, simulated
capacity and the price ranking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.load.fleet import gpu_price
from kneepoint.planning.layouts import Shape, layout
from kneepoint.planning.lengths import request_lengths
from kneepoint.planning.plan import make_plan, plan_lengths
from kneepoint.policies.pruning.quant_effects import W4A16_RISK
from kneepoint.records.plan import Plan
from kneepoint.report.document import to_markdown
from kneepoint.report.plan_report import plan_document

from .conftest import CONFIGS

QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"
PLAN_70B = CONFIGS / "studies" / "plan-llama70b.yaml"


@pytest.mark.parametrize(
    ("overrides", "real_tokens"),
    [
        # tests/fixtures/real/README.md: the KV cache vLLM 0.26.0 logged on the H100
        ([], 450_736),
        (["engine.quantization=fp8"], 503_600),
        (["engine.max_num_seqs=1024", "engine.max_num_batched_tokens=8192"], 449_968),
    ],
)
def test_the_kv_pool_planned_for_llama_8b_is_within_2_percent_of_real_vllms(
    overrides: list[str], real_tokens: int
) -> None:
    study = load_study(QUICKSTART, overrides)
    lay = layout(
        study.gpu, study.model, study.engine, Shape(1), gpus=8, lengths=plan_lengths(study)
    )
    assert lay.fits
    assert lay.kv_tokens == pytest.approx(real_tokens, rel=0.02)


def test_chat_lengths_size_max_model_len_to_serve_every_request() -> None:
    lengths = request_lengths(load_study(QUICKSTART).workload)
    # chat: prompts lognormal(256, 0.8) up to 4,096, outputs lognormal(192, 0.7) up to 1,024
    assert lengths.longest_tokens == 4096 + 1024 and lengths.max_model_len == 5120
    assert 1700 < lengths.p99_tokens < 2300 and 400 < lengths.p50_tokens < 600
    # a max_model_len at the p99, rounded up, rejects the 1% past it (less after rounding)
    assert lengths.p99_max_model_len == 2048 and 0.0 < lengths.over_p99_share < 0.01


def test_70b_on_h100_refuses_tp1_in_vllms_words_and_ranks_tp_2_4_8_by_price() -> None:
    study = load_study(PLAN_70B)
    plan = make_plan(study, [study.gpu], 8, {})
    by_tp = {lay.tensor_parallel_size: lay for lay in plan.layouts}
    assert by_tp[1].refusal is not None
    assert by_tp[1].refusal.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert by_tp[1].weight_gib == pytest.approx(70.6e9 * 2 / 2**30, rel=0.01)
    ranked = plan.ranked()
    assert sorted(lay.tensor_parallel_size for lay in ranked) == [2, 4, 8]
    costs = [lay.prediction.usd_per_million_output(lay.tensor_parallel_size)  # type: ignore[union-attr]
             for lay in ranked]  # fmt: skip
    assert all(c is not None for c in costs) and costs == sorted(costs)  # type: ignore[type-var]
    for lay in ranked:
        assert lay.prediction is not None and lay.prediction.capacity_rps
        assert lay.replicas == 8 // lay.tensor_parallel_size
    # TP 2 keeps ~4 GiB for KV: the model's 131,072-token context would be refused; the
    # chat-sized max_model_len is what lets it start.
    assert by_tp[2].max_model_len == 5120 and by_tp[2].kv_tokens < 40_000
    assert by_tp[2].refusal_as_configured is not None
    assert "max seq len (131072)" in by_tp[2].refusal_as_configured
    # fp8 weights at TP 2 leave ~10x the KV room
    fp8 = {w.quantization: w.kv_tokens for w in by_tp[2].weights}["fp8"]
    assert fp8 is not None and fp8 > 8 * by_tp[2].kv_tokens


def test_layouts_past_two_gpus_need_nvlink_and_enough_gpus() -> None:
    study = load_study(PLAN_70B)
    lengths = plan_lengths(study)
    l40s = gpu_catalogue()["l40s"]
    assert not l40s.nvlink and gpu_catalogue()["h100-sxm"].nvlink
    lay = layout(l40s, study.model, study.engine, Shape(4), gpus=8, lengths=lengths)
    assert lay.excluded is not None and "needs NVLink" in lay.excluded
    lay = layout(study.gpu, study.model, study.engine, Shape(8), gpus=4, lengths=lengths)
    assert lay.excluded == "needs 8 GPUs; the node has 4"
    # Qwen2.5-7B's 28 attention heads (4 KV heads): TP 8 does not divide them
    qwen7b = model_catalogue()["qwen2.5-14b"].model_copy(
        update={"num_attention_heads": 28, "num_kv_heads": 4}
    )
    lay = layout(study.gpu, qwen7b, study.engine, Shape(8), gpus=8, lengths=lengths)
    assert lay.excluded == (
        "Total number of attention heads (28) must be divisible by tensor parallel size (8)."
    )


def test_a_price_given_for_a_gpu_beats_the_studys_and_the_catalogues() -> None:
    study = load_study(QUICKSTART)  # budget: $2.50 per H100-hour
    h100, h200 = gpu_catalogue()["h100-sxm"], gpu_catalogue()["h200-sxm"]
    assert gpu_price(study, h100, {}) == 2.5
    assert gpu_price(study, h200, {}) == h200.usd_per_hour  # the study's price is for its GPU
    assert gpu_price(study, h100, {"h100-sxm": 2.2}) == 2.2


def test_the_command_writes_the_plan_and_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert main(["plan", str(PLAN_70B), "--gpus", "2", "--out", str(out)]) == 0
    text = capsys.readouterr()
    assert "vLLM would refuse to start" in text.out and "plan: h100-sxm TP 2" in text.err
    plan = Plan.model_validate(json.loads((out / "plan.json").read_text()))
    assert [lay.tensor_parallel_size for lay in plan.ranked()] == [2]
    assert (out / "plan.md").read_text().startswith("# Plan: llama-3.1-70b for chat")
    # plan said w4a16 slowed small-batch decode, the reverse of tune's text (issue "Step 17")
    said = " ".join((out / "plan.md").read_text().split())
    assert W4A16_RISK in said.replace("W4a16", "w4a16") and "small-batch" not in said
    assert main(["plan", str(PLAN_70B), "--gpu-catalogue", "h100,nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--gpu-catalogue" in err and "unknown GPU h100, nope" in err and "\n" not in err
    assert main(["plan", str(PLAN_70B), "--price", "h100-sxm=free"]) == 2
    assert "--price h100-sxm=free" in capsys.readouterr().err


@pytest.mark.slow  # four knee searches up to 166 req/s on the virtual clock (~45 s)
def test_llama_8b_on_h100_is_recommended_at_tp1_replicated_over_the_node(tmp_path: Path) -> None:
    study = load_study(QUICKSTART)
    plan = make_plan(study, [study.gpu], 8, {})
    ranked = plan.ranked()
    assert ranked[0].tensor_parallel_size == 1 and ranked[0].max_model_len == 5120
    per_gpu = [lay.prediction.per_gpu_rps(lay.tensor_parallel_size) for lay in ranked]  # type: ignore[union-attr]
    assert per_gpu == sorted(per_gpu, reverse=True)  # type: ignore[type-var]
    # the node as TP x DP: eight TP 1 replicas serve more than one TP 8 server, and it says why
    text = to_markdown(plan_document(plan), tmp_path)
    assert "TP 1 x DP 8: " in text and "TP 8 x DP 1: " in text
    assert "TP 8 gives one server 1." in text and "from 8x the GPUs" in text
    assert "**TP 1 x DP 8** serves the node best" in text and "--data-parallel-size 8" in text
