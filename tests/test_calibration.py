"""Recorded real sweeps (tests/fixtures/real) load with the study they were measured under, and
the simulator replays them at the same configurations and rates."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.calibration.recorded import find_recorded, load_recorded
from kneepoint.calibration.replay import replay
from kneepoint.config import ConfigError

from .conftest import REPO

REAL = REPO / "tests" / "fixtures" / "real"
H100 = REAL / "h100-llama8b-chat"


def test_every_recording_loads_with_its_study() -> None:
    found = {r.name: r for r in find_recorded([REAL])}
    assert {"base", "fp8", "defaults"} <= set(found)
    fp8 = found["fp8"]
    assert fp8.study.engine.quantization == "fp8" and fp8.study.gpu.name == "h100-sxm"
    assert fp8.simulated().backend.kind == "sim"
    # The measured figures of shared/real-h100's README.
    assert found["base"].result.capacity_rps == pytest.approx(40.31, abs=0.01)
    assert fp8.result.capacity_rps == pytest.approx(44.43, abs=0.01)


def test_the_replay_measures_every_recorded_rate_and_repeat() -> None:
    base = load_recorded(H100 / "base")
    simulated = replay(base)
    assert sorted((p.repeat, p.rate_rps) for p in simulated.points) == sorted(
        (p.repeat, p.rate_rps) for p in base.result.points
    )
    # Real base capacity 40.31 req/s (H100, vLLM 0.26.0): the uncalibrated simulator within 10%.
    assert simulated.capacity_rps == pytest.approx(40.31, rel=0.10)


def test_a_folder_without_a_recording_is_one_clear_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"neither a sweep\.json nor a folder with one"):
        load_recorded(tmp_path)
    (tmp_path / "sweep.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"not a sweep: kind: Field required"):
        load_recorded(tmp_path)
    (tmp_path / "sweep.json").write_bytes((H100 / "base" / "sweep.json").read_bytes())
    with pytest.raises(ConfigError, match=r"no study\.yaml beside it"):
        load_recorded(tmp_path)
