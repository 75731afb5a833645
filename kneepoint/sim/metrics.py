"""vLLM's Prometheus metrics for the simulated engine: the same names, types and buckets.

Fed from the engine's steps and finished requests; rendered by prometheus_client, so a scraper
cannot tell the text from a V1 vLLM server's (labels ``model_name`` and ``engine``). Server-side
latencies start at the request's arrival at the engine, as vLLM's do.
"""

from __future__ import annotations

import itertools

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kneepoint.physics import MemoryPlan, ResolvedEngine
from kneepoint.sim.engine import StepRecord
from kneepoint.sim.request import SimRequest

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CLOCK_LAG_METRIC = "kneepoint:sim_clock_lag_seconds"
"""Not a vLLM metric: how late each step's tokens left the simulator behind its own clock
(``kneepoint.probes.telemetry.signals`` reads the share later than ``CLOCK_LAG_LIMIT_S``)."""
CLOCK_LAG_LIMIT_S = 0.005
CLOCK_LAG_BUCKETS = (0.0005, 0.001, 0.002, CLOCK_LAG_LIMIT_S, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


def one_two_five_buckets(limit: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit`` (vLLM's token-count buckets)."""
    buckets: list[float] = []
    base = 1
    while base <= limit:
        buckets += [base * m for m in (1, 2, 5) if base * m <= limit]
        base *= 10
    return tuple(buckets)


class VllmMetrics:
    """The V1 metric families in their own registry."""

    def __init__(
        self, model_name: str, engine: ResolvedEngine, memory: MemoryPlan, cache_dtype: str
    ) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model_name, "engine": "0"}
        self._labels = labels
        names = list(labels)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=self.registry).labels(**labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=self.registry).labels(**labels)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=self.registry).labels(
                **labels
            )

        self.running = gauge("vllm:num_requests_running", "Requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemptions.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of tokens."
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local prefix cache)."
        )
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=self.registry,
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        request_histograms = {
            "e2e_request_latency": "Histogram of e2e request latency in seconds.",
            "request_queue_time": "Histogram of time spent in WAITING phase for request.",
            "request_prefill_time": "Histogram of time spent in PREFILL phase for request.",
            "request_decode_time": "Histogram of time spent in DECODE phase for request.",
            "request_inference_time": "Histogram of time spent in RUNNING phase for request.",
        }
        self.latency = {
            key: histogram(f"vllm:{key}_seconds", doc, REQUEST_LATENCY_BUCKETS)
            for key, doc in request_histograms.items()
        }
        token_buckets = one_two_five_buckets(engine.max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions", "Number of preemptions per request.", token_buckets
        )
        self.clock_lag = histogram(
            CLOCK_LAG_METRIC,
            "Simulator only: how late each step's tokens left, in seconds.",
            CLOCK_LAG_BUCKETS,
        )
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [
                "block_size",
                "cache_dtype",
                "enable_prefix_caching",
                "gpu_memory_utilization",
                "num_gpu_blocks",
            ],
            registry=self.registry,
        )
        info.labels(
            block_size=str(engine.block_size),
            cache_dtype=cache_dtype,
            enable_prefix_caching=str(engine.enable_prefix_caching),
            gpu_memory_utilization=str(engine.gpu_memory_utilization),
            num_gpu_blocks=str(memory.num_blocks),
        ).set(1)

    def observe_step(self, step: StepRecord, sampled: int) -> None:
        """One engine step: gauges after it, its token counts and preemptions."""
        self.running.set(step.running)
        self.waiting.set(step.waiting)
        self.kv_usage.set(step.kv_usage)
        self.iteration_tokens.observe(step.num_tokens)
        self.prompt_tokens.inc(step.prompt_tokens)
        self.generation_tokens.inc(sampled)
        if step.preempted:
            self.preemptions.inc(step.preempted)

    def observe_admission(self, query_tokens: int, hit_tokens: int) -> None:
        self.prefix_queries.inc(query_tokens)
        self.prefix_hits.inc(hit_tokens)
        self.prompt_tokens_cached.inc(hit_tokens)

    def observe_finished(self, req: SimRequest, reason: str = "length") -> None:
        """A finished request's latencies, from its arrival at the engine."""
        times = req.token_times_s
        first, last = times[0], times[-1]
        scheduled = req.first_scheduled_s if req.first_scheduled_s is not None else first
        self.ttft.observe(first - req.arrival_s)
        for a, b in itertools.pairwise(times):
            self.itl.observe(b - a)
        if len(times) > 1:
            self.tpot.observe((last - first) / (len(times) - 1))
        self.latency["e2e_request_latency"].observe(last - req.arrival_s)
        self.latency["request_queue_time"].observe(scheduled - req.arrival_s)
        self.latency["request_prefill_time"].observe(first - scheduled)
        self.latency["request_decode_time"].observe(last - first)
        self.latency["request_inference_time"].observe(last - scheduled)
        self.request_prompt_tokens.observe(req.prompt_len)
        self.request_generation_tokens.observe(req.num_output)
        self.request_preemptions.observe(req.preemptions)
        self._success.labels(**self._labels, finished_reason=reason).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
