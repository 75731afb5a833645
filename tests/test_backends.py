"""The launch backend: every failure class produced by a stand-in for `vllm serve` and named
from its output, the process group gone after each test; and a real `kneepoint sim serve`
started, identified and measured through the same launcher."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from kneepoint.config import load_study
from kneepoint.load.plan import PlannedRequest
from kneepoint.probes.backends import (
    LaunchBackend,
    RunningServer,
    open_target,
    sim_argv,
    vllm_argv,
)
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.server.identity import config_mismatches
from kneepoint.probes.server.server_failure import ServerFailedError, classify, kv_capacity_tokens
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.engine import EngineConfig
from tests.conftest import SMALL

FAKE = Path(__file__).resolve().parent / "support" / "fakes" / "fake_vllm.py"
CONFIG = EngineConfig(model="llama-3.2-1b", max_num_seqs=32, block_size=16)


def _fake(mode: str, **kwargs: float) -> LaunchBackend:
    spec = VllmBackend(command=(sys.executable, str(FAKE), mode))
    return LaunchBackend(vllm_argv(spec), **kwargs)  # type: ignore[arg-type]


def _children_gone(log: Path) -> None:
    pids = [int(p) for p in re.findall(r"engine core started, pid (\d+)", log.read_text())]
    assert pids, "the fake logs its child"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and
                 psutil.Process(p).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
        if not alive:
            return
        time.sleep(0.05)
    pytest.fail(f"children still running: {alive}")


@pytest.mark.parametrize(
    ("mode", "kind", "words"),
    [
        ("oom", "startup_oom", "CUDA out of memory"),
        ("bad-flag", "bad_argument", "unrecognized arguments: --bogus-flag"),
        ("crash", "not_started", "Engine core initialization failed"),
        ("hang", "hung", "log silent"),
        ("slow", "timed_out", "still starting"),
    ],
)
def test_each_start_failure_is_classified_and_nothing_is_left(
    tmp_path: Path, mode: str, kind: str, words: str
) -> None:
    backend = _fake(mode, startup_timeout_s=3.0, hang_after_s=1.5)
    with pytest.raises(ServerFailedError) as info, backend.serve(CONFIG, tmp_path):
        pass
    failure = info.value.failure
    assert failure.kind == kind
    assert words in failure.message
    assert (failure.exit_code is None) == (kind in {"hung", "timed_out"})
    _children_gone(tmp_path / "server.log")


def test_a_server_that_dies_mid_sweep_is_named_crashed(tmp_path: Path) -> None:
    spec = VllmBackend(command=(sys.executable, str(FAKE), "serve"))
    argv = vllm_argv(spec)
    backend = LaunchBackend(lambda c, h, p, s: [*argv(c, h, p, s), "--die-after-requests", "1"])
    plan = [PlannedRequest(i, i * 0.1, "c", (7, 8, 9), 30, None) for i in range(20)]
    with backend.serve(CONFIG, tmp_path) as endpoint:
        assert endpoint.kv_capacity_tokens == 1_750_000
        records = asyncio.run(run_load(endpoint.url, plan, LoadOptions(endpoint.served_model)))
        failure = endpoint.failure()
    assert records[0].ok and not records[-1].ok, "it served, then went away"
    assert failure is not None and failure.kind == "crashed" and failure.exit_code == 1
    assert "fatal error" in failure.message
    _children_gone(tmp_path / "server.log")


def test_sim_serve_through_the_launcher_is_identified_and_stopped(tmp_path: Path) -> None:
    backend = LaunchBackend(sim_argv("h100", "llama-3.2-1b"), sim_telemetry=True)
    with backend.serve(CONFIG, tmp_path) as endpoint:
        assert endpoint.served_model.startswith("llama-3.2-1b-kp")
        assert endpoint.kv_capacity_tokens and endpoint.kv_capacity_tokens > 100_000
        assert endpoint.notes == ()
        assert endpoint.failure() is None
        pid = endpoint.process.pid if endpoint.process else 0
        attached = RunningServer(endpoint.url)
        with attached.serve(CONFIG, tmp_path) as seen:
            assert seen.served_model == endpoint.served_model
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_refused_sim_config_is_classified_from_its_output(tmp_path: Path) -> None:
    backend = LaunchBackend(sim_argv("l4", "llama-3.1-8b"), startup_timeout_s=30)
    tiny = EngineConfig(model="llama-3.1-8b", kv_cache_memory_bytes=2**20)
    with pytest.raises(ServerFailedError) as info, backend.serve(tiny, tmp_path):
        pass
    assert info.value.failure.kind == "startup_oom"
    assert "No available memory for the cache blocks" in info.value.failure.message


def test_config_mismatches_name_what_differs() -> None:
    labels = {"block_size": "32", "gpu_memory_utilization": "0.9",
              "enable_prefix_caching": "True", "cache_dtype": "auto"}  # fmt: skip
    config = EngineConfig(model="m", block_size=16, gpu_memory_utilization=0.9,
                          enable_prefix_caching=False, kv_cache_dtype="fp8")  # fmt: skip
    assert config_mismatches(labels, config) == [
        "block_size is 32, asked 16",
        "enable_prefix_caching is True, asked False",
        "cache_dtype is auto, asked fp8",
    ]


def test_startup_log_readers() -> None:
    assert kv_capacity_tokens("INFO CPU KV cache size: 8,192 tokens\n") == 8192
    assert kv_capacity_tokens("nothing here") is None
    oom = classify("ValueError: No available memory for the cache blocks. Try increasing", 1)
    assert oom.kind == "startup_oom"
    assert classify("", -9).kind == "crashed"


def test_a_refused_start_is_named_by_the_exception_the_engine_raised_first() -> None:
    log = (Path(__file__).parent / "fixtures" / "server_logs" / "cpu-block-size-16.log").read_text()
    failure = classify(log, 1, started=False)
    assert failure.kind == "not_started"
    assert (
        failure.message == "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."
    )


def test_a_failed_start_counts_the_seconds_it_held_the_device(tmp_path: Path) -> None:
    study = load_study(SMALL)
    crashing = VllmBackend(command=(sys.executable, str(FAKE), "crash"))
    started = time.monotonic()
    with (
        pytest.raises(ServerFailedError) as info,
        open_target(study.model_copy(update={"backend": crashing}), CONFIG, tmp_path),
    ):
        pass
    assert 0.0 < info.value.held_s <= time.monotonic() - started


def test_orphans_are_reaped_even_when_their_group_leader_is_dead(tmp_path: Path) -> None:
    import subprocess

    from kneepoint.probes.server.process import _started, reap_orphans

    # A leader that forks a long-lived child into its group and exits: what an agent killed
    # mid-run leaves when vLLM's API server died before its engine core.
    script = "import subprocess; print(subprocess.Popen(['sleep', '300']).pid, flush=True)"
    leader = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    started = _started(leader.pid)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    leader.wait()
    (tmp_path / "server.pid").write_text(f"{leader.pid}\n{started}\n")
    (tmp_path / "stale.pid").write_text("999999999\n1\n")  # long gone: left alone
    assert psutil.pid_exists(child)
    assert reap_orphans(tmp_path) == [leader.pid]
    assert _dead_within(child, 5.0)
    assert not list(tmp_path.glob("*.pid"))


def _dead_within(pid: int, seconds: float) -> bool:
    """Gone, or a zombie its new parent has not reaped yet (containers' init may not)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
