"""Hostile servers (tests/hostile_server.py on 127.0.0.1): a stream that is not what vLLM
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
from kneepoint.probes.backends import AttachBackend, check_identity
from tests.hostile_server import PAGE as _P  # noqa
import httpx as _h
class PageTooLargeError(Exception): ...
def capped_text(c, u): r = c.get(u); return r.status_code, r.text
from kneepoint.probes.loadgen import LoadOptions, run_load
from kneepoint.probes.process import ServerFailedError
from kneepoint.probes.prom import parse_metrics
from kneepoint.records.engine import EngineConfig
from tests.hostile_server import METRICS_MODES, MODELS_MODES, STREAM_MODES, HostileServer


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
        with odd, AttachBackend(url).serve(EngineConfig(model="m"), tmp_path):
            pass
        with pytest.raises(ServerFailedError, match="does not answer as vLLM does"):
            check_identity(url, "m", EngineConfig(model="m"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", [*STREAM_MODES, *METRICS_MODES, *MODELS_MODES])
def test_diagnose_against_a_hostile_server_ends_in_one_line_or_a_result(
    mode: str, tmp_path: Path
) -> None:
    with HostileServer(mode) as url:
        done = subprocess.run(
            [sys.executable, "-m", "kneepoint", "diagnose", "--url", url, "--model",
             "llama-3.1-8b", "--workload", "chat", "--knee-rps", "2", "--runs-dir",
             str(tmp_path), "--set", "workload.client.request_timeout_s=3"],
            check=False, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-3000:]
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("kneepoint:")]
        assert len(errors) == 1, output[-3000:]
