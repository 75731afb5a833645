"""Conformance of `kneepoint sim serve`: started as a real process on loopback, spoken to by
httpx (streaming SSE by hand, as kneepoint's load generator does) and by the `openai` client,
scraped with prometheus_client's parser."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kneepoint.probes.backends import sim_argv
from kneepoint.records.calibration import Calibration
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.engine import EngineConfig
from kneepoint.sim.openai_api import Responder, sse_event
from kneepoint.sim.serve_args import add_serve_arguments, resolve_serve_args

KNEEPOINT = [sys.executable, "-m", "kneepoint.cli.main"]
REFERENCE_NAMES = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info", "vllm:num_preemptions", "vllm:prompt_tokens",
    "vllm:generation_tokens", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
    "vllm:request_success", "vllm:prompt_tokens_cached", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds", "vllm:iteration_tokens_total",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
    "vllm:request_num_preemptions",
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = _free_port()
    proc = subprocess.Popen(
        [*KNEEPOINT, "sim", "serve", "--gpu", "h100", "--model", "llama-3.2-1b",
         "--port", str(port), "--max-num-seqs", "64", "--max-model-len", "4096",
         "--no-enable-prefix-caching", "--enable-prefix-caching"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"server did not start: {proc.communicate()[1]}")
    yield url, proc
    proc.terminate()
    proc.wait(timeout=10)


def _sse(url: str, path: str, body: dict[str, object]) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    with httpx.stream("POST", url + path, json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                events.append({"done": True})
            else:
                events.append(json.loads(line.removeprefix("data: ")))
    return events


def test_httpx_streams_token_ids_with_a_usage_chunk(server: tuple[str, object]) -> None:
    url, _ = server
    body = {
        "model": "llama-3.2-1b", "prompt": list(range(1000, 1100)), "max_tokens": 7,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    events = _sse(url, "/v1/completions", body)
    assert events[-1] == {"done": True}
    assert events[-2]["usage"] == {"prompt_tokens": 100, "completion_tokens": 7,
                                   "total_tokens": 107}  # fmt: skip
    tokens = events[:-2]
    # Like vLLM, the server merges tokens a slow reader has not taken yet into one chunk, so a
    # busy machine can see fewer chunks than tokens; usage counts them all.
    assert 1 <= len(tokens) <= 7
    reasons = [e["choices"][0]["finish_reason"] for e in tokens]  # type: ignore[index]
    assert reasons == [None] * (len(tokens) - 1) + ["length"]


def test_openai_client_streams_completions_and_chat(server: tuple[str, object]) -> None:
    url, _ = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
    assert [m.id for m in client.models.list()] == ["llama-3.2-1b"]
    chunks = list(client.completions.create(
        model="llama-3.2-1b", prompt="Hello there", max_tokens=5, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert "".join(c.choices[0].text for c in chunks if c.choices).strip()
    chat = list(client.chat.completions.create(
        model="llama-3.2-1b", messages=[{"role": "user", "content": "Hi"}],
        max_completion_tokens=4, stream=True, stream_options={"include_usage": True},
    ))  # fmt: skip
    assert chat[0].choices[0].delta.role == "assistant"
    assert chat[-1].usage is not None and chat[-1].usage.completion_tokens == 4
    whole = client.chat.completions.create(
        model="llama-3.2-1b", messages=[{"role": "user", "content": "Hi"}], max_tokens=3
    )
    assert whole.usage is not None and whole.usage.completion_tokens == 3


def test_errors_are_answered_as_vllm_answers_them(server: tuple[str, object]) -> None:
    url, _ = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096"):
        client.completions.create(model="llama-3.2-1b", prompt=[5] * 4000, max_tokens=200)


def test_metrics_carry_vllm_names_and_counters_match_histograms(
    server: tuple[str, object],
) -> None:
    url, _ = server
    for _ in range(3):
        _sse(url, "/v1/completions", {"prompt": [7] * 64, "max_tokens": 16, "stream": True})
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
    assert set(families) >= REFERENCE_NAMES
    assert families["vllm:num_preemptions"].type == "counter"
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"

    def value(family: str, sample: str) -> float:
        return sum(s.value for s in families[family].samples if s.name == sample)

    assert value("vllm:generation_tokens", "vllm:generation_tokens_total") == value(
        "vllm:request_generation_tokens", "vllm:request_generation_tokens_sum"
    )
    assert value("vllm:prompt_tokens", "vllm:prompt_tokens_total") == value(
        "vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum"
    )
    assert value("vllm:request_success", "vllm:request_success_total") == value(
        "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_count"
    )
    info = families["vllm:cache_config_info"].samples[0].labels
    assert info["enable_prefix_caching"] == "True" and int(info["num_gpu_blocks"]) > 0
    # and its own clock lag, one observation per step, which a real vLLM does not export
    steps = value("vllm:iteration_tokens_total", "vllm:iteration_tokens_total_count")
    lag = "kneepoint:sim_clock_lag_seconds"
    assert families[lag].type == "histogram" and value(lag, f"{lag}_count") == steps > 0


def test_telemetry_reports_gpm_on_hopper(server: tuple[str, object]) -> None:
    url, _ = server
    sample = httpx.get(f"{url}/telemetry", params={"window_s": 5}).json()
    assert {"gpu_util_pct", "sm_util_pct", "tensor_util_pct", "dram_bw_util_pct"} <= set(sample)
    assert sample["dram_bw_util_pct"] is not None
    assert httpx.get(f"{url}/telemetry", params={"window_s": "x"}).status_code == 400


def test_startup_log_uses_vllm_wording(server: tuple[str, subprocess.Popen[str]]) -> None:
    _, proc = server
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 5
    while "Maximum concurrency" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.readline()
    assert "GPU KV cache size: " in seen and " tokens per request: " in seen


def test_unmodeled_flag_and_refusal_exit_cleanly() -> None:
    bad = subprocess.run(
        [*KNEEPOINT, "sim", "serve", "--gpu", "h100", "--model", "llama-3.1-8b",
         "--enable-lora"], check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "kneepoint: kneepoint sim serve: --enable-lora: not modeled by the simulator "
        "(modeled: see --help)"
    ]
    refused = subprocess.run(
        [*KNEEPOINT, "sim", "serve", "--gpu", "l4", "--model", "llama-3.1-70b"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 1  # as vLLM exits when it refuses to start
    assert "Traceback" not in refused.stderr and "memory" in refused.stderr.lower()


def test_a_calibration_fitted_elsewhere_is_refused_in_one_line(tmp_path: Path) -> None:
    fitted = Calibration(gpu="l40s", model="llama-3.1-8b", step_error_rel=0.05,
                         efficiency=Efficiency(mfu=0.6))  # fmt: skip
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(fitted.model_dump(mode="json")))
    done = subprocess.run(
        [*KNEEPOINT, "sim", "serve", "--gpu", "h100", "--model", "llama-3.1-8b",
         "--calibration", str(path)], check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"kneepoint: kneepoint sim serve: --calibration: {path} was fitted for l40s / "
        "llama-3.1-8b, not h100-sxm / llama-3.1-8b"
    ]


def test_a_study_s_calibration_reaches_the_launched_simulator(tmp_path: Path) -> None:
    fitted = Calibration(gpu="h100-sxm", model="llama-3.1-8b", step_error_rel=0.05,
                         efficiency=Efficiency(mfu=0.6, frontend_latency_s=0.02))  # fmt: skip
    path = tmp_path / "h100.yaml"
    path.write_text(yaml.safe_dump(fitted.model_dump(mode="json")))
    argv = sim_argv("h100-sxm", "llama-3.1-8b", path)(EngineConfig(model="m"), "127.0.0.1", 1, "m")
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args, unknown = parser.parse_known_args(argv[argv.index("serve") + 1 :])
    assert resolve_serve_args(args, unknown).efficiency == fitted.efficiency


@pytest.mark.parametrize("kind", ["completion", "chat"])
def test_a_streamed_chunk_is_the_json_of_its_body(kind: str) -> None:
    """The server writes the common chunk from bytes built once around its text: they must be
    the compact JSON of the chunk's body, whatever the text."""
    responder = Responder(kind, "m", 7)
    for text in (" word", ' "quoted" \\ back', " ünïcødé ☃", "", " \n\t"):
        for first, reason, so_far in ((False, None, None), (True, None, None),
                                      (False, "length", None), (False, None, 3)):  # fmt: skip
            event = responder.chunk_event(text, reason, first, so_far)
            assert event == sse_event(responder.chunk(text, reason, first, so_far))
            assert json.loads(event.removeprefix(b"data: ")) == responder.chunk(
                text, reason, first, so_far
            )
