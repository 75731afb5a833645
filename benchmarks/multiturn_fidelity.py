"""The KV and prefix-cache model against a real engine, on conversations: the same multi-turn
load sent to vLLM's CPU build and to the simulator, their prefix-cache hit rates, KV usage and
preemptions side by side, with the pruning rule's predicted hit rate beside them.

The study is tests/fixtures/studies/cpu-tiny-multiturn.yaml (the multiturn-chat preset scaled
to the tests' tiny Llama), with prefix caching on. For each KV pool (``--kv-mib``) a fresh
server is launched as kneepoint launches one, sent one point at ``--rate`` by kneepoint's load
generator (each session's next turn after its answer and think time), and its ``/metrics``
counters read before and after: the hit rate is the server's prefix-cache hits over its
queries, in tokens, over the whole point (kneepoint's identity check and warm-up request
included, a few hundred tokens). The simulator runs the same plan on a fresh engine of the
same pool and block size. Goal: hit rate within 5 points of the real server's at each pool.

Run: .venv/bin/python benchmarks/multiturn_fidelity.py [--rate 8] [--kv-mib 64 8]  (~4 min)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import versions
import vllm_cpu

from kneepoint.config import load_study
from kneepoint.load.plan import plan_requests
from kneepoint.load.size import PointSize
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.memory import plan_memory
from kneepoint.policies.pruning.prefix_savings import prefix_reuse
from kneepoint.probes.backends.measure import measure
from kneepoint.probes.client.loadgen import LoadOptions
from kneepoint.probes.runtime import configure_logging
from kneepoint.probes.telemetry.prom import parse_metrics
from kneepoint.records.study import StudySpec
from kneepoint.sim.engine import SimEngine
from kneepoint.sim.loadpoint import simulate_load_point

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-multiturn.yaml"
GOAL_POINTS = 5.0


@dataclass(frozen=True)
class Side:
    """One engine's account of the point."""

    hit_rate: float
    hit_tokens: float
    query_tokens: float
    kv_usage_mean: float
    preemptions: float
    turns_ok: int
    turns: int


def _study(model: Path, kv_mib: int) -> StudySpec:
    return load_study(STUDY, [f"model={model / 'config.json'}", f"engine.model={model}",
                              "engine.enable_prefix_caching=true",
                              f"engine.kv_cache_memory_bytes={kv_mib * 2**20}"])  # fmt: skip


def _counters(url: str) -> tuple[float, float, float]:
    scrape = parse_metrics(httpx.get(f"{url}/metrics", timeout=30).text)
    return tuple(  # type: ignore[return-value]
        scrape.value(name) or 0.0
        for name in ("prefix_cache_hits", "prefix_cache_queries", "preemptions")
    )


def _real(venv: Path, study: StudySpec, rate: float, size: PointSize) -> Side:
    plan = plan_requests(study.workload, rate, num_requests=size.requests(rate),
                         seed=study.workload.seed, vocab_size=study.model.vocab_size)  # fmt: skip
    with vllm_cpu.served(venv, study.engine) as endpoint:
        before = _counters(endpoint.url)
        options = LoadOptions(model=endpoint.served_model)
        measured = measure(endpoint.url, plan, rate, options, study.slo,
                           instruments=endpoint.instruments, warmup_s=size.warmup_s)  # fmt: skip
        after = _counters(endpoint.url)
    hits, queries, preempted = (a - b for a, b in zip(after, before, strict=True))
    records = measured.records
    kv_use = measured.point.signals.kv_usage_mean or 0.0
    return Side(hits / queries, hits, queries, kv_use, preempted,
                sum(r.ok for r in records), len(records))  # fmt: skip


def _simulated(study: StudySpec, rate: float, size: PointSize) -> Side:
    engine = SimEngine(study.gpu, study.model, study.engine, study.efficiency)
    point = simulate_load_point(study, rate, size.requests(rate), warmup_s=size.warmup_s,
                                on=engine)  # fmt: skip
    records = point.load.records
    kv = engine.kv  # its own counters, over the whole point as the server's are read
    return Side(kv.hit_tokens / kv.query_tokens, kv.hit_tokens, kv.query_tokens,
                point.point.signals.kv_usage_mean or 0.0, float(point.preemptions),
                sum(r.ok for r in records), len(records))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=8.0, help="requests (turns) per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="arrivals per point")
    parser.add_argument("--kv-mib", type=int, nargs="+", default=[64, 8], help="KV pools")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    started = time.monotonic()
    venv = vllm_cpu.vllm_venv()
    met = True
    _header(args.rate)
    with tempfile.TemporaryDirectory() as tmp:
        model = vllm_cpu.tiny_model(venv, Path(tmp) / "tiny-llama")
        for kv_mib in args.kv_mib:
            study = _study(model, kv_mib)
            size = PointSize.for_study(study, args.seconds)
            engine = resolve_engine(study.engine, study.gpu, study.model)
            memory = plan_memory(study.gpu, study.model, engine)
            predicted = prefix_reuse(study.workload, memory.kv_tokens,
                                     block_tokens=engine.block_size).prompt_share  # fmt: skip
            real = _real(venv, study, args.rate, size)
            sim = _simulated(study, args.rate, size)
            met &= _row(kv_mib, memory.kv_tokens, predicted, real, sim)
    verdict = "met" if met else "NOT met"
    print(f"goal: hit rate within {GOAL_POINTS:g} points at every pool: {verdict}")
    print(f"wall time {time.monotonic() - started:.0f} s")


def _header(rate: float) -> None:
    print(f"multi-turn chat (tiny Llama, vLLM CPU build) at {rate:g} turns/s, prefix caching on")
    print(f"{'KV pool':>14} | {'hit rate real':>13} {'sim':>6} {'sim-real':>8} "
          f"{'predicted':>9} | {'KV use real':>11} {'sim':>5} | {'preempt real':>12} "
          f"{'sim':>5} | turns ok", flush=True)  # fmt: skip


def _row(kv_mib: int, tokens: int, predicted: float, real: Side, sim: Side) -> bool:
    """Print one pool's figures; whether its hit rates meet the goal."""
    gap = 100 * (sim.hit_rate - real.hit_rate)
    print(f"{kv_mib:>4} MiB {tokens:>5} tok | {real.hit_rate:>13.1%} {sim.hit_rate:>6.1%} "
          f"{gap:>+7.1f}p {predicted:>9.1%} | {real.kv_usage_mean:>11.1%} "
          f"{sim.kv_usage_mean:>5.1%} | {real.preemptions:>12.0f} {sim.preemptions:>5.0f} | "
          f"{real.turns_ok}/{real.turns} real, {sim.turns_ok}/{sim.turns} sim; "
          f"tokens hit/queried real {real.hit_tokens:,.0f}/{real.query_tokens:,.0f}, "
          f"sim {sim.hit_tokens:,.0f}/{sim.query_tokens:,.0f}", flush=True)  # fmt: skip
    return abs(gap) <= GOAL_POINTS


if __name__ == "__main__":
    main()
