"""The BLIS campaign's 38 real vLLM runs (tests/fixtures/published/blis-campaign) read as
kneepoint studies: every run expressible, its figures whole, and what the published files say
of the servers checked against kneepoint's physics."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.published_campaign import (
    METRICS,
    Simulated,
    load_runs,
    load_workloads,
    study_of,
)
from kneepoint.physics import plan_memory, resolve_engine

RUNS = {run.id: run for run in load_runs()}
WORKLOADS = load_workloads()


def test_every_run_is_a_study_with_every_figure() -> None:
    assert len(RUNS) == 38
    for run in RUNS.values():
        study = study_of(run, WORKLOADS[run.workload])
        assert study.gpus == run.tensor_parallel_size
        assert study.engine.max_num_seqs == 128 and study.engine.max_model_len == 4096
        for stage in (*run.stages, run.whole):
            for source in (stage.measured, stage.blis_evolved, stage.blis_roofline):
                assert {f"{m}_ms" for m in METRICS} <= source.keys()
        assert all(s.requests == round(s.rate_rps * s.duration_s) for s in run.stages)
    gpus = {run.gpu for run in RUNS.values()}
    assert gpus == {"h100-sxm", "a100-80gb-sxm", "l40s"}


def test_the_corpus_is_the_hundred_prompts_sent_in_turn() -> None:
    study = study_of(RUNS[16], WORKLOADS["general"])
    group = study.workload.prefix_groups[0]
    assert (group.documents, group.popularity) == (100, "cycle")
    own = study.workload.classes[0].input_tokens
    assert group.prefix_tokens % 16 == 0 and group.prefix_tokens + own.tokens == 575  # type: ignore[union-attr]


def test_the_clients_output_count_is_recovered_from_the_three_means() -> None:
    # inference-perf counts an answer by tokenising its text again: Llama-3.1-8B's 248
    # generated tokens read as ~237, CodeLlama's as ~249.
    assert RUNS[16].stages[0].client_output_tokens() == pytest.approx(237.5, abs=0.5)
    assert RUNS[2].stages[0].client_output_tokens() == pytest.approx(249.4, abs=0.5)


def test_a_simulated_itl_is_the_campaigns_function_of_e2e_and_ttft() -> None:
    sim = Simulated(np.array([20.0, 30.0]), np.array([2020.0, 2030.0]), failed=0)
    assert sim.figure("itl_mean", 201.0) == pytest.approx(10.0)
    assert sim.figure("ttft_p90", 201.0) == pytest.approx(np.percentile([20.0, 30.0], 90))
    pooled = Simulated.pooled([sim, sim])
    assert pooled.figure("e2e_mean", 1.0) == pytest.approx(2025.0)


@pytest.mark.parametrize(
    ("run_id", "logged_tokens"),
    # kv_blocks_total_gpu x 16 in inference-sim/training replay_data (commit c7a8c358)
    [(2, 26_602 * 16), (6, 31_356 * 16), (9, 27_510 * 16)],
)
def test_the_kv_pool_is_what_vllm_015_allocated(run_id: int, logged_tokens: int) -> None:
    run = RUNS[run_id]
    study = study_of(run, WORKLOADS[run.workload])
    engine = resolve_engine(study.engine, study.gpu, study.model)
    assert plan_memory(study.gpu, study.model, engine).kv_tokens == pytest.approx(
        logged_tokens, rel=0.01
    )
