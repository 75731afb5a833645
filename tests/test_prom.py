"""Parsing vLLM's /metrics: captured text from real servers (named by vLLM version) and the
older names the aliases must still find."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.probes.server.identity import config_mismatches
from kneepoint.probes.telemetry.prom import Histogram, parse_metrics, quantile
from kneepoint.records.engine import EngineConfig

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "metrics").glob("vllm-*.prom"))


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_captured_metrics_parse_and_every_canonical_name_resolves(path: Path) -> None:
    scrape = parse_metrics(path.read_text())
    for name in ("running", "waiting", "kv_cache_usage", "preemptions", "prompt_tokens",
                 "generation_tokens", "prefix_cache_queries", "prefix_cache_hits"):  # fmt: skip
        assert scrape.value(name) is not None, name
    for name in ("ttft", "itl", "e2e", "queue_time", "iteration_tokens"):
        hist = scrape.histogram(name)
        assert hist is not None and hist.count > 0, name
        assert hist.buckets[-1][0] == float("inf") and hist.buckets[-1][1] == hist.count
    config = scrape.labels("cache_config")
    assert config is not None and int(config["num_gpu_blocks"]) > 0


def test_older_names_are_found_by_the_same_canonical_name() -> None:
    # Written by hand in the pre-0.10 naming (no capture of such a server is kept here).
    text = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 3.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:time_per_output_token_seconds_count{model_name="m"} 4.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.05
"""
    scrape = parse_metrics(text)
    assert scrape.value("kv_cache_usage") == 0.25
    itl = scrape.histogram("itl")
    assert itl is not None and itl.count == 4 and itl.mean == pytest.approx(0.0125)


def test_engines_sum_their_counts_and_average_their_usage() -> None:
    text = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.2
vllm:kv_cache_usage_perc{engine="1"} 0.6
"""
    scrape = parse_metrics(text)
    assert scrape.value("running") == 8
    assert scrape.value("kv_cache_usage") == pytest.approx(0.4)


def test_histogram_quantiles_interpolate_inside_the_bucket() -> None:
    hist = Histogram(sum=0.0, count=10.0, buckets=((0.1, 2.0), (0.2, 10.0), (float("inf"), 10.0)))
    assert quantile(hist, 0.5) == pytest.approx(0.1 + 0.1 * (3 / 8))
    assert quantile(hist, 0.1) == pytest.approx(0.05)
    earlier = Histogram(sum=0.0, count=2.0, buckets=((0.1, 2.0), (0.2, 2.0), (float("inf"), 2.0)))
    assert hist.minus(earlier).buckets == ((0.1, 0.0), (0.2, 8.0), (float("inf"), 8.0))


def test_a_gpu_servers_cache_config_is_checked_against_the_knobs_it_was_started_with() -> None:
    """vLLM 0.26.0 on the lent H200 (tests/fixtures/real/h200-llama8b-kv-tune): its
    cache_config_info names the utilisation it was started with, and a study asking another
    is told the server runs a different configuration."""
    page = Path(__file__).parent / "fixtures" / "metrics" / "vllm-0.26.0-h200.prom"
    labels = parse_metrics(page.read_text()).labels("cache_config")
    assert labels is not None and labels["kv_cache_size_tokens"] == "61648"
    started = EngineConfig(model="/tmp/llama8b", gpu_memory_utilization=0.17, block_size=16)
    assert config_mismatches(labels, started) == []
    other = started.replace(gpu_memory_utilization=0.8)
    assert config_mismatches(labels, other) == ["gpu_memory_utilization is 0.17, asked 0.8"]
