"""The host's speed for vLLM's CPU build, measured before the real tier sizes its studies.

The same tiny-Llama study measured ~25-40 req/s on an Intel host with AVX-512 and ~3.2-3.8 on
an AMD EPYC with AVX2 only, where oneDNN's linear falls back to torch's (REFERENCE.md, "Machines
differ"): a study with fixed rates, pool and SLO binds on one host and not on the other. So
the real tier first serves the tiny model with a roomy pool and measures it with `vllm bench
serve` (an independent client): closed-loop throughput and TTFT at a few concurrencies (128
prompt / 32 answer tokens, every answer run to its length) and prefill throughput (1,024-token
prompts, one token out). The studies are then sized from those readings, so that their rates,
their starved pool and their SLO bind the same way on any host.

Measured 2026-11-27 on an AMD EPYC (AVX2 only), 64 MiB pool: 128 / 32 tokens 2.32, 4.72, 5.78
and 6.59 req/s at 1, 4, 16 and 32 sequences (TTFT p50 136 ms alone, prefill ~1,000 tokens/s);
256 / 64 tokens 1.09, 3.14, 3.20 and 3.83 req/s at 1, 4, 16 and 48. A point sends at least 40
requests (kneepoint.load.size), so on such a host a point of the 256 / 64 study took 45-60 s
and its baseline's 21 repeat points alone 16 minutes: the KV study is served the shorter
requests, whose points take half as long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from benchmarks.vllm_cpu import bench_serve, engine, served

CONCURRENCIES = (1, 4, 16, 32)
PROMPT_TOKENS, ANSWER_TOKENS = 128, 32
PREFILL_PROMPT_TOKENS = 1024
# make_tiny_model.py beside this file: 2 x 4 layers x 2 heads x 64 x 2 B
KV_BYTES_PER_TOKEN = 2048
BLOCK_TOKENS = 128  # the CPU build's default block size
REAL_TUNE_CI = ("tuning.burst.enabled=false",)
"""What the real tier's tunes leave out to fit CI's time on a slow host: the burst check
(a server start and a burst; the slow tier checks it on the simulator, every tune)."""
KNEE_SHARE = 0.8
"""The knee's concurrency: the fewest sequences that serve this share of the most measured."""


@dataclass(frozen=True)
class HostSpeed:
    """What `vllm bench serve` measured of the tiny model on this host."""

    requests_per_s: dict[int, float]
    """Closed-loop requests per second (128 / 32 tokens) at each concurrency."""
    ttft_p50_ms: dict[int, float]
    prefill_tokens_per_s: float
    isa: str
    """AVX-512 where the CPU has it, else AVX2 only: the CPU build's linear differs."""

    def knee_concurrency(self) -> int:
        most = max(self.requests_per_s.values())
        return min(c for c, rps in self.requests_per_s.items() if rps >= KNEE_SHARE * most)

    def capacity_rps(self) -> float:
        return max(self.requests_per_s.values())

    def starved_pool_bytes(self) -> int:
        """A KV pool that holds a quarter of the sequences the knee runs (whole blocks of each
        128 + 32-token request), at least three and at most four, and the block vLLM keeps
        back: the pool, not the host's compute, binds first. On an AVX2-only host (knee 16:
        four requests) the starved server's SLO capacity was 3.5 req/s and a 36 MiB pool's
        screened at 11 (the closed-loop figures here are `vllm bench serve`'s, whose own client
        shares the two cores: they under-read the server). Eight, on the 2-core Intel host
        whose knee read 32, barely bound: the starved server's capacity repeated at 50.3 req/s
        and a cap of 64 sequences screened at 59, where four bound it at 38. 1 MiB, four
        blocks, would not start with max_model_len 512: vLLM counted 384 tokens usable."""
        per_request = math.ceil((PROMPT_TOKENS + ANSWER_TOKENS) / BLOCK_TOKENS) * BLOCK_TOKENS
        sequences = min(4, max(3, self.knee_concurrency() // 4))
        return (sequences * per_request + BLOCK_TOKENS) * KV_BYTES_PER_TOKEN

    def light_rps(self, prompt_tokens: int) -> float:
        """A rate that loads the server without queueing it: 40% of the closed-loop ceiling and
        of the prefill the prompts need. CI's AVX2-only host (5.3 req/s, 1,242 prefill tokens/s)
        was sent 256-token prompts at a fixed 6.7 req/s, 1.4x its prefill: the server's TTFT
        read 2.5 s of queue and its API front, on the same core, added 0.54 s (2026-11-28)."""
        return min(0.4 * self.capacity_rps(), 0.4 * self.prefill_tokens_per_s / prompt_tokens)

    def summary(self) -> str:
        rates = ", ".join(f"{c}: {r:.2f}" for c, r in self.requests_per_s.items())
        return (
            f"{self.isa}; req/s by concurrency {rates}; knee at {self.knee_concurrency()}; "
            f"prefill {self.prefill_tokens_per_s:.0f} tokens/s"
        )


def host_isa() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "AVX-512" if " avx512f" in flags else "AVX2 only"


def measure_host(venv: Path, model: Path) -> HostSpeed:
    """Serve the tiny model with a roomy pool (64 MiB: 32,768 tokens) and measure it."""
    rps: dict[int, float] = {}
    ttft: dict[int, float] = {}
    with served(venv, engine(model, 64 * 2**20)) as endpoint:
        warm = dict(input_tokens=PROMPT_TOKENS, output_tokens=ANSWER_TOKENS)
        bench_serve(venv, endpoint, model, math.inf, 4, max_concurrency=4, **warm)
        for c in CONCURRENCIES:
            run = bench_serve(venv, endpoint, model, math.inf, 2 * c + 4, max_concurrency=c,
                              **warm)  # fmt: skip
            rps[c] = run.get("request_throughput")
            ttft[c] = run.get("median_ttft_ms")
        prefill = bench_serve(venv, endpoint, model, math.inf, 12, max_concurrency=4,
                              input_tokens=PREFILL_PROMPT_TOKENS, output_tokens=1)  # fmt: skip
    return HostSpeed(rps, ttft, prefill.get("total_input_tokens") / prefill.get("duration"),
                     host_isa())  # fmt: skip


def kv_study_sizing(speed: HostSpeed) -> list[str]:
    """tests/fixtures/studies/cpu-tiny-kv.yaml sized to this host: the probe's 128 / 32-token
    requests, a pool that holds a quarter of the knee's sequences (max_model_len cut to 512, so
    a pool of a few requests still starts), the knee search started at 40% of the closed-loop
    ceiling, and a TTFT limit of at least 2 s and five times the unstarved server's median at
    4 sequences (an AVX2-only host: 0.37 s)."""
    ttft_ms = max(2000, math.ceil(5 * speed.ttft_p50_ms[4] / 100) * 100)
    shape = f"{{kind: fixed, tokens: {PROMPT_TOKENS}}}", f"{{kind: fixed, tokens: {ANSWER_TOKENS}}}"
    return [
        f"workload.name=fixed-{PROMPT_TOKENS}-{ANSWER_TOKENS}",
        f"workload.classes=[{{name: c, input_tokens: {shape[0]}, output_tokens: {shape[1]}}}]",
        "engine.max_model_len=512",
        f"engine.kv_cache_memory_bytes={speed.starved_pool_bytes()}",
        f"tuning.start_rps={0.4 * speed.capacity_rps():.3g}",
        f"slo.default.ttft_p99_ms={ttft_ms}",
        "tuning.validate_repeats=2",  # each repeat is two server starts, ~50 s each on AVX2
        "budget.max_trials=1",  # the KV move: a second trial is a long shot's screen (~2 min)
        *REAL_TUNE_CI,
    ]


def prompt_ttft_limit_ms(speed: HostSpeed, longest_prompt_tokens: int) -> int:
    """A TTFT p99 limit of at least 2 s and three times the longest prompt's prefill alone
    (in whole half-seconds), so that queueing, not one long prompt, breaks it: on an AVX2-only
    host a 1,952-token prompt's prefill alone took ~1.7 s, and a multi-turn study held to 2 s
    met its SLO at 2.2x the rate its knee search had failed at (2026-11-27)."""
    alone_ms = 1000.0 * longest_prompt_tokens / speed.prefill_tokens_per_s
    return max(2000, math.ceil(3 * alone_ms / 500) * 500)
