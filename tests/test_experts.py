"""Mixture-of-experts layouts: vLLM spreads the routed experts over every GPU of a server, its
data-parallel ranks included (sliced, or whole with --enable-expert-parallel), so an MoE
server's ranks share the experts; the memory plan, the roofline, `kneepoint plan`, the pruning
rules and the node's command all price them so (``kneepoint.physics.experts``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.load.node import node_replicas
from kneepoint.physics.defaults import ResolvedEngine, resolve_engine
from kneepoint.physics.experts import ExpertLayout, dispatch_s, expert_params
from kneepoint.physics.memory import plan_memory, weight_bytes_per_gpu
from kneepoint.physics.roofline import BatchShape, Roofline
from kneepoint.planning.layouts import Shape, layout, shapes
from kneepoint.planning.plan import plan_lengths
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.study import StudySpec

from .conftest import CONFIGS, QUICKSTART


def _study(model: str = "qwen3-30b-a3b", *sets: str) -> StudySpec:
    return load_study(QUICKSTART, [f"model={model}", "gpus=8", *sets])


def _resolved(study: StudySpec, **changes: object) -> ResolvedEngine:
    return resolve_engine(study.engine.replace(**changes), study.gpu, study.model)


def test_an_moe_servers_ranks_share_the_experts_and_a_dense_ones_do_not() -> None:
    moe, dense = _study(), _study("llama-3.1-8b")
    experts = expert_params(moe.model)
    # Qwen3-30B-A3B: 128 experts of 3 x 2048 x 768 over 48 layers, ~29.0e9 of its 30.5e9
    assert experts == pytest.approx(128 * 3 * 2048 * 768 * 48, rel=0.03)
    one = weight_bytes_per_gpu(moe.model, _resolved(moe))
    eight = weight_bytes_per_gpu(moe.model, _resolved(moe, data_parallel_size=8))
    assert one - eight == pytest.approx(experts * 2 * 7 / 8, rel=1e-9)
    # more expert bytes spread means more KV per GPU: the plan's 151k -> 668k tokens
    pools = [plan_memory(moe.gpu, moe.model, _resolved(moe, data_parallel_size=d)) for d in (1, 8)]
    assert pools[1].kv_tokens > 4 * pools[0].kv_tokens
    assert weight_bytes_per_gpu(dense.model, _resolved(dense)) == weight_bytes_per_gpu(
        dense.model, _resolved(dense, data_parallel_size=8)
    )
    assert expert_params(dense.model) == 0.0


def test_whole_experts_never_stream_less_than_slices_and_tie_at_large_batches() -> None:
    model = _study().model
    for ranks in (1, 8):
        sliced = ExpertLayout(model, 1, ranks, expert_parallel=False)
        whole = ExpertLayout(model, 1, ranks, expert_parallel=True)
        for tokens in (1, 2, 8, 64, 512):
            assert whole.read_fraction(tokens) >= sliced.read_fraction(tokens) - 1e-9
        assert whole.read_fraction(512) == pytest.approx(sliced.read_fraction(512), abs=1e-3)
    # one token on one rank of eight: 8 of 128 experts touched, 1/16 of each GPU's on average,
    # but the busiest GPU of eight holds two or three of them
    sliced, whole = ExpertLayout(model, 8, 1, False), ExpertLayout(model, 8, 1, True)
    assert sliced.read_fraction(1) == pytest.approx(8 / 128)
    assert 2.0 < whole.read_fraction(1) / sliced.read_fraction(1) < 3.5


def test_each_moe_layer_gathers_the_ranks_tokens_and_a_dense_model_does_not() -> None:
    moe, dense, eff = _study(), _study("llama-3.1-8b"), Efficiency()
    assert dispatch_s(moe.gpu, moe.model, 1, 256, eff) == 0.0
    assert dispatch_s(dense.gpu, dense.model, 8, 256, eff) == 0.0
    two, eight = (dispatch_s(moe.gpu, moe.model, dp, 256, eff) for dp in (2, 8))
    assert 0.0 < two < eight
    shape = BatchShape(
        num_requests=64, new_tokens=64, attention_pairs=64e3, kv_tokens=64_000, samples=64
    )
    alone = Roofline(moe.gpu, moe.model, _resolved(moe)).step(shape)
    shared = Roofline(moe.gpu, moe.model, _resolved(moe, data_parallel_size=8)).step(shape)
    # each GPU streams an eighth of the experts, and pays the gather for it
    assert shared.weight_read_s < alone.weight_read_s / 3
    assert shared.allreduce_s > alone.allreduce_s == 0.0


def test_the_plan_lays_out_shared_expert_servers_for_an_moe_model_only() -> None:
    moe, dense = _study(), _study("llama-3.1-8b")
    assert shapes(dense.model, 8) == [Shape(tp) for tp in (1, 2, 4, 8)]
    found = shapes(moe.model, 8)
    assert Shape(1, 4) in found and Shape(1, 8, True) in found and Shape(4, 2, True) in found
    assert all(s.tp * s.dp <= 8 for s in found) and Shape(8, 2) not in found
    lay = layout(moe.gpu, moe.model, moe.engine, Shape(1, 8), gpus=8, lengths=plan_lengths(moe))
    assert lay.gpus == 8 and lay.replicas == 1 and lay.label == "TP 1 x DP 8"


def test_an_moe_winner_is_not_copied_over_the_node() -> None:
    moe, dense = _study(), _study("llama-3.1-8b")
    assert node_replicas(dense, dense.engine) == 8
    assert node_replicas(moe, moe.engine) == 1


@pytest.mark.slow
def test_an_moe_tune_spreads_the_experts_over_two_ranks_as_priced(tmp_path: Path) -> None:
    """Qwen3-30B-A3B from TP 1 on eight H100s (~45 s): the DP rule prices two ranks sharing
    the experts and the move is measured within 1.25x; whole experts gain nothing."""
    study = CONFIGS / "studies" / "llama8b-8gpu.yaml"
    knobs = "[data_parallel_size,enable_expert_parallel,max_num_seqs]"
    sets = ["model=qwen3-30b-a3b", "engine.tensor_parallel_size=1", f"search.knobs={knobs}"]
    argv = ["tune", str(study), "--runs-dir", str(tmp_path), "--set", *sets[:1]]
    argv += [a for s in sets[1:] for a in ("--set", s)]
    assert main(argv) == 0
    report = next(tmp_path.glob("*/report.md")).read_text()
    line = next(row for row in report.splitlines() if "| data_parallel_size 1 -> 2" in row)
    predicted = float(line.split("| coordinate | ")[1].split("x")[0])
    gain = float(line.split("| +")[1].split("%")[0]) / 100 + 1.0
    assert predicted > 1.2 and 1 / 1.25 < gain / predicted < 1.25, line
    assert "--data-parallel-size 2" in next(tmp_path.glob("*/best-command.txt")).read_text()
