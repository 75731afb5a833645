"""The whole loop on a real engine: `kneepoint tune` of a KV-starved tiny Llama on vLLM's CPU
build (tests/fixtures/studies/cpu-tiny-kv.yaml), on the 2-core machine that also runs the load
generator, its pool, rates and SLO sized from the host's measured speed
(tests/support/real_vllm/host_speed.py: a pool of a quarter of the sequences the host's closed-loop
knee runs). It must name the cache as what binds, promote a larger KV budget that measures at
least 1.3x the start (vLLM bench on an AVX-512 host: 16 MiB -> 1 GiB gave 1.6-1.7x the output
ceiling; on an AVX2-only host a 4-request pool's capacity was 3.5 req/s where a 36 MiB one
screened at 11), write its report, exit 0 and leave no vLLM process behind. The real_vllm
tier (installs vLLM's CPU build)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, TuneRun, kv_promoted
from tests.conftest import real_tune as run_tune
from tests.support.real_vllm.host_speed import HostSpeed, kv_study_sizing

pytestmark = pytest.mark.real_vllm
STUDY = REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"


@pytest.fixture(scope="module")
def start_kv_bytes(host_speed: HostSpeed) -> int:
    return host_speed.starved_pool_bytes()


@pytest.fixture(scope="module")
def real_tune(
    vllm_python: Path, tiny_model: Path, host_speed: HostSpeed,
    tmp_path_factory: pytest.TempPathFactory,
) -> TuneRun:  # fmt: skip
    runs = tmp_path_factory.mktemp("real-tune")
    return run_tune(STUDY, runs, vllm_python, tiny_model, kv_study_sizing(host_speed))


def test_the_tune_names_the_cache_and_promotes_a_larger_kv_budget(
    real_tune: TuneRun, start_kv_bytes: int
) -> None:
    kv_promoted(real_tune, start_kv_bytes)


def test_the_tune_writes_its_report_and_names_the_winner(
    real_tune: TuneRun, start_kv_bytes: int
) -> None:
    assert (real_tune.folder / "report.md").is_file()
    assert (real_tune.folder / "report.html").is_file()
    best = (real_tune.folder / "best-command.txt").read_text()
    assert "--kv-cache-memory-bytes" in best and str(start_kv_bytes) not in best
    assert "serve the winner with" in real_tune.stdout


def test_the_tune_leaves_no_vllm_process(real_tune: TuneRun) -> None:
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if "vllm.entrypoints" in cmdline and str(real_tune.folder.parent.parent) in cmdline:
            left.append(proc.pid)
    assert not left
