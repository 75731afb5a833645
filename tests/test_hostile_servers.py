"""Hostile servers (tests/support/hostile_server.py on 127.0.0.1): a stream that is not what vLLM
sends is a counted failed request, a /metrics page with NaN or tens of megabytes costs its
signals, an odd /v1/models is one clear failure, and `kneepoint diagnose --url` ends each in
a result or one ``kneepoint:`` line, never a traceback or a hang."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kneepoint.load.plan import PlannedRequest
from kneepoint.probes.backends import RunningServer
from kneepoint.probes.backends.base import rejected
from kneepoint.probes.client.capped import PageTooLargeError, capped_text
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.server.identity import check_identity
from kneepoint.probes.server.server_failure import ServerFailedError
from kneepoint.probes.telemetry.prom import parse_metrics
from kneepoint.records.engine import EngineConfig
from kneepoint.records.measure import RequestRecord
from tests.support.hostile_server import MODELS_MODES, STREAM_MODES, HostileServer


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_a_hostile_stream_is_a_counted_failed_request(mode: str) -> None:
    plan = [PlannedRequest(i, 0.05 * i, "c", (5, 6), 4, None) for i in range(3)]
    began = time.monotonic()
    with HostileServer(mode) as url:
        options = LoadOptions(model="m", request_timeout_s=2.5)
        records = asyncio.run(run_load(url, plan, options))
    assert len(records) == 3 and not any(r.ok for r in records), mode
    assert all(r.error for r in records)
    assert time.monotonic() - began < 10.0  # a hang or a trickle is cut at its timeout


def test_a_non_object_chunk_names_what_it_got() -> None:
    plan = [PlannedRequest(0, 0.0, "c", (5, 6), 4, None)]
    with HostileServer("list_chunk") as url:
        (record,) = asyncio.run(run_load(url, plan, LoadOptions(model="m")))
    assert record.error == "bad stream: a chunk that is not a JSON object: [1, 2, 3]"


def test_nan_and_infinite_metrics_are_dropped_not_raised() -> None:
    with HostileServer("nan_metrics") as url:
        _, text = capped_text(httpx.Client(), f"{url}/metrics")
    scrape = parse_metrics(text)
    assert scrape.value("kv_cache_usage") is None and scrape.value("running") is None
    assert scrape.histogram("ttft") is None  # a histogram with an infinite count: dropped
    assert scrape.value("waiting") is not None and scrape.histogram("itl") is not None


def test_a_huge_metrics_page_is_not_read() -> None:
    began = time.monotonic()
    with HostileServer("huge_metrics") as url, pytest.raises(PageTooLargeError, match="4 MiB"):
        capped_text(httpx.Client(), f"{url}/metrics")
    assert time.monotonic() - began < 10.0
    with HostileServer("huge_metrics") as url:
        notes = check_identity(url, "m", EngineConfig(model="m"))
    assert notes == ("/metrics is larger than kneepoint reads: nothing to check against",)


@pytest.mark.parametrize("mode", MODELS_MODES)
def test_an_odd_models_answer_is_one_clear_failure(mode: str, tmp_path: Path) -> None:
    with HostileServer(mode) as url:
        odd = pytest.raises(ServerFailedError, match=r"does not answer as vLLM does|no model")
        with odd, RunningServer(url).serve(EngineConfig(model="m"), tmp_path):
            pass
        with pytest.raises(ServerFailedError, match="does not answer as vLLM does"):
            check_identity(url, "m", EngineConfig(model="m"))


CLI_MODES = {
    # mode: (exit code, what its one line or its console says)
    "str_chunk": (1, "the server failed every request of the point"),
    "all_500": (1, "HTTP 500: boom, not json"),
    "hang": (1, "hung: not one request of the point got a token"),
    "models_null": (1, "does not answer as vLLM does"),
    "nan_metrics": (0, "diagnose"),
    "huge_metrics": (0, "diagnose"),
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(CLI_MODES))
def test_diagnose_against_a_hostile_server_ends_in_one_line_or_a_result(
    mode: str, tmp_path: Path
) -> None:
    """One mode of each kind end to end (every stream mode is covered above): the server
    answering "0.0-hostile" at /version once ended in a traceback from the knob catalogue."""
    with HostileServer(mode) as url:
        done = subprocess.run(
            [sys.executable, "-m", "kneepoint", "diagnose", "--url", url, "--gpu", "h100-sxm",
             "--model", "llama-3.1-8b", "--workload", "chat", "--knee-rps", "10", "--runs-dir",
             str(tmp_path), "--set", "workload.client.request_timeout_s=3",
             # a pace that makes points of a few seconds (the hostile answers are instant)
             "--set", "slo.default.itl_p95_ms=4"],
            check=False, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    output = done.stdout + done.stderr
    code, said = CLI_MODES[mode]
    assert "Traceback" not in output and done.returncode == code, output[-3000:]
    assert said in output, output[-3000:]
    if code != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("kneepoint:")]
        assert len(errors) == 1, output[-3000:]
    else:
        assert list(tmp_path.glob("*/diagnosis.json")), output[-3000:]


def _timed_out(index: int, tokens: int) -> RequestRecord:
    chunks = tuple(0.1 * i for i in range(tokens))
    error = "timed out 3 s after its scheduled time"
    return RequestRecord(index=index, traffic_class="c", scheduled_s=0.0, sent_s=0.0,
                         chunk_times_s=chunks, error=error)  # fmt: skip


def test_a_point_where_no_request_got_a_token_is_a_hung_server() -> None:
    hung = rejected([_timed_out(i, 0) for i in range(4)])
    assert hung is not None and hung.kind == "hung"
    assert "not one request of the point got a token (4 of 4 timed out" in hung.message
    # Past the ceiling an overloaded server times requests out, but answers some of them.
    assert rejected([_timed_out(0, 3), *(_timed_out(i, 0) for i in range(1, 4))]) is None
