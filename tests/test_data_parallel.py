"""data_parallel_size: replicas on the virtual clock behind vLLM 0.32's balancer, priced per
GPU, and the winner served on the study's GPUs as replicas of it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from kneepoint.cli.main import main
from kneepoint.config import ConfigError, load_study
from kneepoint.load.node import filled_node
from kneepoint.load.plan import plan_requests
from kneepoint.planning.predict import predict
from kneepoint.records.study import StudySpec
from kneepoint.run.folder import serve_command
from kneepoint.sim.deployment import serving
from kneepoint.sim.loadpoint import simulate_load_point
from kneepoint.sim.replicas import Replicas
from kneepoint.sim.virtual import run_plan

from .conftest import QUICKSTART


def _study(*sets: str) -> StudySpec:
    return load_study(QUICKSTART, ["gpus=8", *sets])


def test_replicas_multiply_capacity_less_the_balancers_loss() -> None:
    study = _study()
    one = predict(study, None, 40.0).capacity_rps
    two = predict(study.model_copy(update={"engine": study.engine.replace(
        data_parallel_size=2)}), None, 80.0).capacity_rps  # fmt: skip
    assert one is not None and two is not None
    assert 1.85 < two / one < 2.1, (one, two)


def test_the_balancer_spreads_requests_and_each_engine_streams_its_own() -> None:
    study = _study()
    sim = serving(study.gpu, study.model, study.engine.replace(data_parallel_size=4))
    assert isinstance(sim, Replicas) and sim.replicas == 4
    assert sim.resolved.api_server_count == 4  # vllm serve's default: one per replica
    plan = plan_requests(study.workload, 120.0, num_requests=800, seed=3,
                         vocab_size=study.model.vocab_size)  # fmt: skip
    load = run_plan(sim, plan, timeout_s=120.0)
    assert all(r.error is None for r in load.records)
    ran = Counter(step.engine for step in load.run.steps)
    assert sorted(ran) == [0, 1, 2, 3]
    per_engine = Counter(id(sim.frontend_for(req)) for _, req in load.run.submitted)
    counts = sorted(per_engine.values())
    assert len(counts) == 4 and counts[-1] < 1.15 * counts[0], counts


def test_sessions_run_on_replicas_and_their_signals_read_per_engine() -> None:
    study = _study("workload=multiturn-chat")
    config = study.engine.replace(data_parallel_size=2)
    point = simulate_load_point(study, 4.0, 200, config, seed=1)
    one = simulate_load_point(study, 2.0, 100, study.engine, seed=1)
    assert point.point.completed > 0 and not point.point.failed
    # gauges and the step rate are each engine's, as its /metrics would show them
    two, single = point.point.signals, one.point.signals
    assert two.steps_per_s is not None and single.steps_per_s is not None
    assert 0.5 < two.steps_per_s / single.steps_per_s < 2.0
    assert two.gpu_util_pct is not None and two.gpu_util_pct <= 100.0


def test_replicas_must_fit_the_studys_gpus() -> None:
    with pytest.raises(ConfigError, match=r"engine.data_parallel_size: 4 replicas of 4 GPU"):
        _study("engine.tensor_parallel_size=4", "engine.data_parallel_size=4")


def test_the_winner_fills_the_node_with_replicas_when_judged_per_gpu() -> None:
    study = _study()
    config = study.engine.replace(tensor_parallel_size=2)
    assert filled_node(study, config).data_parallel_size == 4
    assert "--tensor-parallel-size 2 --data-parallel-size 4" in serve_command(study, config)
    # one GPU, a server judged as a whole, or replicas the study set itself: as it is
    assert filled_node(load_study(QUICKSTART), config) == config
    whole = _study("objective.per_gpu=false")
    assert filled_node(whole, config) == config
    set_here = config.replace(data_parallel_size=2)
    assert filled_node(study, set_here) == set_here


def test_replicas_are_never_searched_per_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["diagnose", str(QUICKSTART), "--runs-dir", str(tmp_path), "--set", "gpus=4",
            "--set", "tuning.start_rps=16",
            "--set", "search.knobs=[tensor_parallel_size,data_parallel_size]"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    (folder,) = tmp_path.iterdir()
    pruning = json.loads((folder / "diagnosis.json").read_text())["pruning"]
    [ruled] = [r for r in pruning["ruled_out"] if r["knob"] == "data_parallel_size"]
    assert "no gain per GPU" in ruled["reason"]
    assert not [s for s in pruning["long_shots"] if s["knob"]["name"] == "data_parallel_size"]


@pytest.mark.slow  # a whole tune on the virtual clock (~35 s)
def test_a_two_gpu_tune_narrows_to_tp1_and_serves_two_replicas(tmp_path: Path) -> None:
    study = tmp_path / "dp2.yaml"
    study.write_text(yaml.safe_dump({
        "name": "dp2", "gpu": "h100-sxm", "gpus": 2, "model": "llama-3.1-8b",
        "backend": {"kind": "sim", "clock": "virtual"},
        "engine": {"tensor_parallel_size": 2, "max_model_len": 8192},
        "workload": "chat", "budget": {"max_trials": 1},
        "search": {"knobs": ["tensor_parallel_size", "data_parallel_size"]},
        "tuning": {"start_rps": 20},
    }))  # fmt: skip
    assert main(["tune", str(study), "--runs-dir", str(tmp_path / "runs")]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    command = (folder / "best-command.txt").read_text()
    assert "--tensor-parallel-size 1 --data-parallel-size 2" in command
    assert yaml.safe_load((folder / "best.yaml").read_text())["engine"]["data_parallel_size"] == 2
    report = (folder / "report.md").read_text()
    assert "runs as 2 data-parallel replicas" in report
