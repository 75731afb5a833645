"""A study can describe a CPU host serving vLLM's CPU build (the `cpu` catalogue entry): its
engine defaults are the CPU build's, the block size a server reports wins over any default,
and the diagnosis and reports say CPU where they would say GPU, inventing no GPU reading."""

from __future__ import annotations

import json
from pathlib import Path

from kneepoint.config import knob_catalogue, load_study
from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.measure.progress import LogProgress
from kneepoint.physics.defaults import resolve_engine
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.records.diagnosis import Observation
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint, Signals
from kneepoint.report.diagnosis_document import findings_document
from kneepoint.report.document import to_markdown
from kneepoint.tune.diagnose import measure_and_diagnose
from tests.support.tiny_llama import TINY_LLAMA

from .conftest import REPO

CPU, H100 = gpu_catalogue()["cpu"], gpu_catalogue()["h100-sxm"]
LLAMA_1B = model_catalogue()["llama-3.2-1b"]
STUDY = REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"


def test_the_cpu_build_s_defaults_are_its_own() -> None:
    # vLLM 0.32's CPU build: 128 sequences, 2048 tokens a step, blocks of 128 tokens
    engine = resolve_engine(EngineConfig(model="m"), CPU, LLAMA_1B)
    assert (engine.max_num_seqs, engine.max_num_batched_tokens, engine.block_size) == (
        128, 2048, 128)  # fmt: skip
    assert CPU.kind == "CPU" and H100.kind == "GPU"


def test_the_block_size_the_server_reported_wins_over_a_default() -> None:
    # A CPU build behind a study that named a GPU entry: its cache_config_info said 128
    point = LoadPoint(rate_rps=1.0, window_start_s=0, window_end_s=1, sent=1, completed=1,
                      failed=0, timed_out=0, achieved_rps=1.0, goodput_rps=1.0, meets_slo=False,
                      dists={}, send_lag_p50_ms=0.0, send_lag_p99_ms=0.0, client_bound=False,
                      signals=Signals(block_size=128, num_gpu_blocks=64))  # fmt: skip
    observation = Observation(saturated=point, gpu=H100, model=LLAMA_1B,
                              engine=EngineConfig(model="m"))  # fmt: skip
    context = context_of(observation)
    assert context.engine is not None and context.engine.block_size == 128


def test_a_cpu_study_is_diagnosed_and_reported_as_a_cpu(tmp_path: Path) -> None:
    # the CPU study on the simulator's virtual clock: no NVML or GPM to read, so the roofline
    # tier; every reading names the CPU
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    study = load_study(STUDY, ["backend={kind: sim}", f"model={model / 'config.json'}",
                               f"engine.model={model}", "engine.extra_args=[]",
                               "engine.enforce_eager=null"])  # fmt: skip
    findings = measure_and_diagnose(study, tmp_path, knob_catalogue(), LogProgress())
    saturated = max(findings.result.points, key=lambda p: p.rate_rps).point
    assert saturated.signals.gpu_util_pct is None and saturated.signals.sm_util_pct is None
    text = to_markdown(findings_document(study, *findings), tmp_path)
    assert "on cpu (CPU, sim)" in text
    readings = " ".join(e.reading for e in findings.diagnosis.evidence)
    assert "GPU" not in readings and "HBM" not in readings
