"""Studies that cannot run are refused before any server starts, exit 2, naming the field.

Each case goes through `kneepoint tune` on the simulator's HTTP server (which would launch a
`kneepoint sim serve` process) with process creation forbidden, and through `kneepoint config
check`, which must refuse the same study in the same words.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from unittest import mock

import pytest

from kneepoint.cli.main import main
from kneepoint.tune import feasibility

from .conftest import QUICKSTART

HTTP = "backend={kind: sim, clock: http}"
VLLM_09 = "backend={kind: vllm, vllm_version: '0.9.0'}"


def _refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], *sets: str) -> str:
    """The one line both commands refuse the study with."""
    args = [a for s in sets for a in ("--set", s)]
    runs = tmp_path / "runs"
    with mock.patch.object(subprocess.Popen, "__init__", side_effect=AssertionError("launched")):
        assert main(["tune", str(QUICKSTART), "--runs-dir", str(runs), *args]) == 2
    assert not runs.exists()  # not even a run folder
    tuned = capsys.readouterr()
    assert main(["config", "check", str(QUICKSTART), *args]) == 2
    checked = capsys.readouterr()
    assert checked.out == ""
    [line] = tuned.err.splitlines()
    assert checked.err.splitlines() == [line]
    assert line.startswith("kneepoint: ")
    return line


def test_a_request_longer_than_max_model_len(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refusal(tmp_path, capsys, HTTP, "engine.max_model_len=1024")
    assert ": workload: its longest request" in line
    assert "exceeds max_model_len (1024)" in line


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("engine.block_size=24", "engine.block_size: must be one of"),
        ("engine.kv_cache_dtype=fp4", "engine.kv_cache_dtype: must be"),
        ("engine.gpu_memory_utilization=1.5", "engine.gpu_memory_utilization:"),
        ("engine.quantization=bitsandbytes", "engine.quantization: the simulator cannot run it"),
    ],
)
def test_a_knob_value_outside_its_domain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, field: str
) -> None:
    assert f": {field}" in _refusal(tmp_path, capsys, HTTP, override)


def test_a_knob_the_stated_vllm_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # quickstart searches async_scheduling (vLLM >= 0.10.0) as the seventh knob
    line = _refusal(tmp_path, capsys, VLLM_09)
    assert line.endswith(": search.knobs[6]: vLLM 0.9.0 does not know --async-scheduling "
                         "(it needs vLLM >=0.10.0)")  # fmt: skip


def test_a_knob_the_installed_vllm_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with mock.patch.object(feasibility, "installed_vllm", return_value="0.9.0"):
        line = _refusal(tmp_path, capsys, "backend={kind: vllm}",
                        "search.knobs=[max_num_seqs]", "engine.async_scheduling=true")  # fmt: skip
    assert line.endswith(": engine.async_scheduling: vLLM 0.9.0 (installed) does not know "
                         "--async-scheduling (it needs vLLM >=0.10.0)")  # fmt: skip


def test_a_version_that_is_not_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refusal(tmp_path, capsys, "backend={kind: vllm, vllm_version: latest}")
    assert line.endswith(": backend.vllm_version: 'latest' is not a vLLM version (e.g. 0.11.2)")


def test_an_slo_no_load_can_meet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Llama-3.1-8B on one H100: 8.0e9 params x 0.5 byte / 3.35 TB/s = 1.2 ms a step at best
    line = _refusal(tmp_path, capsys, HTTP, "slo={default: {ttft_p99_ms: 500, itl_p50_ms: 0.4}}")
    assert ": slo.default.itl_p50_ms: 0.4 ms cannot be met at any load" in line
    assert "takes at least 1.2 ms" in line


def test_an_slo_just_above_half_the_floor_is_not_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The floor is an ideal bound with a margin of 2 on top: a tight but possible SLO
    (1 ms ITL: real H100 decode steps of an 8B model take 6-7 ms) is left to measurement."""
    assert main(["config", "check", str(QUICKSTART), "--set",
                 "slo={default: {ttft_p99_ms: 500, itl_p50_ms: 1.0}}"]) == 0  # fmt: skip


def test_an_slo_below_the_floor_only_warns_on_a_real_engine(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real server may run a model or device the study's entries do not describe."""
    sets = ["--set", "backend={kind: vllm}", "--set", "slo={default: {itl_p50_ms: 0.4}}"]
    assert main(["config", "check", str(QUICKSTART), *sets]) == 0
    assert "study.slo_below_floor" in capsys.readouterr().err


def test_a_deadline_in_the_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refusal(tmp_path, capsys, HTTP, "budget.deadline=2020-01-01T00:00:00+00:00")
    assert ": budget.deadline: 2020-01-01T00:00+00:00 is already past" in line


def test_sweep_refuses_an_engine_it_could_not_start_but_not_the_study_s_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kneepoint sweep` measures the engine as given: its knobs are judged, the search's not,
    and nothing is launched."""
    out = ["--out", str(tmp_path / "sweep.json")]
    with mock.patch.object(subprocess.Popen, "__init__", side_effect=AssertionError("launched")):
        assert main(["sweep", str(QUICKSTART), *out, "--set", VLLM_09,
                     "--set", "engine.async_scheduling=true"]) == 2  # fmt: skip
        [line] = capsys.readouterr().err.splitlines()
        assert line.endswith(": engine.async_scheduling: vLLM 0.9.0 does not know "
                             "--async-scheduling (it needs vLLM >=0.10.0)")  # fmt: skip
        assert main(["sweep", str(QUICKSTART), *out, "--set", HTTP,
                     "--set", "slo={default: {itl_p50_ms: 0.4}}"]) == 2  # fmt: skip
        assert ": slo.default.itl_p50_ms: 0.4 ms cannot be met" in capsys.readouterr().err
    assert not (tmp_path / "sweep.json").exists()
