"""tensor_parallel_size as a live knob: a study with several GPUs per server searches it up to
its GPUs, judges configurations per GPU, and screens a wider one where it would tie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.config import ConfigError, load_study
from kneepoint.load.objective import rules
from kneepoint.records.ledger import Promoted
from kneepoint.records.objective import SloCapacity
from kneepoint.records.sweep import SweepResult
from kneepoint.run.ledger import Ledger

from .conftest import CONFIGS

FOUR_GPUS = CONFIGS / "studies" / "llama70b-4gpu.yaml"
QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"


def test_several_gpus_make_the_objective_per_gpu_and_bound_the_tp_size() -> None:
    study = load_study(FOUR_GPUS)
    assert study.gpus == 4 and study.objective == SloCapacity(per_gpu=True)
    assert rules(study.objective).unit() == "req/s per GPU"
    assert load_study(QUICKSTART).objective == SloCapacity()  # one GPU: per server
    with pytest.raises(ConfigError, match=r"tensor_parallel_size: 2 exceeds the study's gpus"):
        load_study(FOUR_GPUS, ["gpus=1"])


def test_a_per_gpu_objective_divides_by_the_servers_gpus() -> None:
    config = load_study(FOUR_GPUS).engine.replace(tensor_parallel_size=4)
    result = SweepResult(kind="validate", config=config, points=(), capacity_rps=10.0,
                         capacity_by_repeat=(9.0, 11.0))  # fmt: skip
    assert rules(SloCapacity(per_gpu=True)).value(result) == 2.5
    assert rules(SloCapacity(per_gpu=True)).by_repeat(result) == (2.25, 2.75)
    assert rules(SloCapacity()).value(result) == 10.0


def _pruning(tmp_path: Path, study: Path, *sets: str) -> dict[str, object]:
    args = ["diagnose", str(study), "--runs-dir", str(tmp_path)]
    args += [item for s in sets for item in ("--set", s)]
    assert main(args) == 0
    (folder,) = tmp_path.iterdir()
    found = json.loads((folder / "diagnosis.json").read_text())["pruning"]
    assert isinstance(found, dict)
    return found


def test_a_starved_kv_pool_proposes_the_wider_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 70B at TP 2 keeps ~24k KV tokens per GPU; TP 4 holds 20x that and runs its step faster
    pruning = _pruning(tmp_path, FOUR_GPUS)
    capsys.readouterr()
    [tp] = [c for c in pruning["candidates"] if c["knob"]["name"] == "tensor_parallel_size"]  # type: ignore[attr-defined]
    assert tp["target"] == 4 and tp["predicted_ratio"] > 1.1
    assert tp["knob"]["domain"]["choices"] == [1, 2, 4]  # no 8 on a 4-GPU server
    assert "per GPU" in tp["reason"]


def test_a_model_that_fits_one_gpu_stays_on_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Llama-3.1-8B at TP 1 (455k KV tokens): TP 2 buys less than twice the batch at today's
    # step time (kneepoint plan simulates 38.3 -> 35.1 req/s per GPU)
    pruning = _pruning(tmp_path, QUICKSTART, "gpus=4", "tuning.start_rps=16",
                       "search.knobs=[tensor_parallel_size]")  # fmt: skip
    capsys.readouterr()
    [ruled] = [r for r in pruning["ruled_out"] if r["knob"] == "tensor_parallel_size"]  # type: ignore[attr-defined]
    assert "TP 1 -> 2" in ruled["reason"] and "no gain per GPU" in ruled["reason"]


@pytest.mark.slow  # a whole tune of a 70B on the virtual clock (~20 s)
def test_a_four_gpu_study_promotes_tp4_and_reports_capacity_per_gpu(tmp_path: Path) -> None:
    assert main(["tune", str(FOUR_GPUS), "--runs-dir", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    promoted = [e for e in Ledger(folder / "ledger.jsonl").read() if isinstance(e, Promoted)]
    assert promoted and promoted[0].config.tensor_parallel_size == 4
    report = (folder / "report.md").read_text()
    assert "req/s per GPU" in report and "--tensor-parallel-size 4" in report


def test_a_scheduling_bound_wide_server_of_a_small_model_narrows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Llama-3.1-8B at TP 8 on eight H100s: CPU-side time sets the step, and its pool is ~3%
    # full. TP 4 runs today's batch in about today's step time on half the GPUs: ~2x per GPU
    # (the simulated tune measured 8.10 -> 16.58 req/s per GPU, 2.05x). Priced on the GPU
    # time alone, with the batch bound to today's pool share, it read 0.97x and was ruled out.
    pruning = _pruning(tmp_path, QUICKSTART, "gpus=8", "engine.tensor_parallel_size=8",
                       "tuning.start_rps=20", "search.knobs=[tensor_parallel_size]")  # fmt: skip
    capsys.readouterr()
    [tp] = [c for c in pruning["candidates"] if c["knob"]["name"] == "tensor_parallel_size"]  # type: ignore[attr-defined]
    assert tp["target"] == 4 and 1.8 < tp["predicted_ratio"] < 2.2, tp["reason"]
