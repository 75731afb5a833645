"""Does scraping `/metrics` perturb a small server? A/B on vLLM's CPU build: the same `vllm bench
serve` load near the server's knee, alone and with a scraper polling `/metrics` beside it
(every 0.5 s, as a dense sampler would), in pairs whose order alternates (A B, B A, ...), on one
server launched as kneepoint launches one.

Per run it prints vLLM bench's own TTFT mean and p99 and output tok/s, the server's own TTFT
mean and preemptions over the run (vLLM's histograms and counters, read before and after),
and, with the scraper, how many scrapes landed and how long they took. Then the median of each
figure over the pairs, scraped over alone. The scrape's own cost is what kneepoint's adaptive
sampler waits out (``kneepoint.probes.telemetry.samplers.COST_FACTOR``).

Run: .venv/bin/python benchmarks/scrape_cost.py [--pairs 3] [--rate 36] [--interval 0.5]
(about 6 minutes with the defaults)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import versions
import vllm_cpu

from kneepoint.probes.backends import Endpoint
from kneepoint.probes.runtime import configure_logging
from kneepoint.probes.telemetry.prom import Scrape, parse_metrics

RUNS_SEEN: list[bool] = []
"""Runs so far: each draws its own prompts (its seed)."""


@dataclass
class Scraper:
    """Polls ``url``/metrics every ``interval_s`` on a thread until stopped."""

    url: str
    interval_s: float
    took_s: list[float] = field(default_factory=list)
    missed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            while not self._stop.wait(self.interval_s):
                began = time.perf_counter()
                try:
                    client.get(f"{self.url}/metrics").raise_for_status()
                except httpx.HTTPError:
                    self.missed += 1
                    continue
                self.took_s.append(time.perf_counter() - began)

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class Run:
    scraped: bool
    bench_ttft_mean_ms: float
    bench_ttft_p99_ms: float
    output_tok_s: float
    server_ttft_mean_ms: float
    preemptions: float
    scrapes: int = 0
    scrape_mean_ms: float = 0.0
    scrape_p99_ms: float = 0.0


def _snapshot(url: str) -> Scrape:
    return parse_metrics(httpx.get(f"{url}/metrics", timeout=30.0).text)


def one_run(
    venv: Path, endpoint: Endpoint, model: Path, args: argparse.Namespace, *, scraped: bool
) -> Run:
    url = endpoint.url
    before = _snapshot(url)
    scraper = Scraper(url, args.interval)
    thread = threading.Thread(target=scraper.run, daemon=True)
    if scraped:
        thread.start()
    prompts = round(args.rate * args.seconds)
    bench = vllm_cpu.bench_serve(venv, endpoint, model, args.rate, prompts, input_tokens=256,
                                 output_tokens=64, seed=len(RUNS_SEEN))  # fmt: skip
    RUNS_SEEN.append(scraped)
    scraper.stop()
    if scraped:
        thread.join()
    after = _snapshot(url)
    ttft = after.histogram("ttft").minus(before.histogram("ttft"))  # type: ignore[union-attr]
    took = sorted(scraper.took_s) or [0.0]
    return Run(
        scraped=scraped, bench_ttft_mean_ms=bench.get("mean_ttft_ms"),
        bench_ttft_p99_ms=bench.get("p99_ttft_ms"), output_tok_s=bench.get("output_throughput"),
        server_ttft_mean_ms=(ttft.mean or 0.0) * 1000.0,
        preemptions=(after.value("preemptions") or 0.0) - (before.value("preemptions") or 0.0),
        scrapes=len(scraper.took_s), scrape_mean_ms=statistics.fmean(took) * 1000.0,
        scrape_p99_ms=took[min(len(took) - 1, int(0.99 * len(took)))] * 1000.0,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=36.0, help="near the 16 MiB server's knee")
    parser.add_argument("--seconds", type=float, default=20.0, help="of arrivals per run")
    parser.add_argument("--interval", type=float, default=0.5, help="between scrapes")
    parser.add_argument("--kv-mib", type=int, default=16)
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    started = time.monotonic()
    venv = vllm_cpu.vllm_venv()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        model = vllm_cpu.tiny_model(venv, Path(tmp) / "tiny-llama")
        with vllm_cpu.served(venv, vllm_cpu.engine(model, args.kv_mib * 2**20)) as endpoint:
            for pair in range(args.pairs):
                order = (False, True) if pair % 2 == 0 else (True, False)
                runs += [one_run(venv, endpoint, model, args, scraped=on) for on in order]
    report(runs, args)
    print(f"wall time {time.monotonic() - started:.0f} s")


def report(runs: list[Run], args: argparse.Namespace) -> None:
    print(f"tiny Llama, KV {args.kv_mib} MiB, {args.rate:g} req/s for {args.seconds:g} s per "
          f"run; scraper every {args.interval:g} s")  # fmt: skip
    print(f"{'run':>4} {'scraped':>8} {'bench TTFT mean':>16} {'p99':>8} {'out tok/s':>10} "
          f"{'server TTFT mean':>17} {'preempt':>8} {'scrapes':>8} "
          f"{'took mean/p99 ms':>17}")  # fmt: skip
    for i, r in enumerate(runs):
        took = f"{r.scrape_mean_ms:.1f}/{r.scrape_p99_ms:.1f}" if r.scraped else "-"
        print(f"{i:>4} {'yes' if r.scraped else 'no':>8} {r.bench_ttft_mean_ms:16.1f} "
              f"{r.bench_ttft_p99_ms:8.1f} {r.output_tok_s:10.0f} {r.server_ttft_mean_ms:17.1f} "
              f"{r.preemptions:8.0f} {r.scrapes if r.scraped else '-':>8} {took:>17}")  # fmt: skip
    print("\nmedian, scraped / alone:")
    for name in ("bench_ttft_mean_ms", "bench_ttft_p99_ms", "output_tok_s", "server_ttft_mean_ms",
                 "preemptions"):  # fmt: skip
        on = statistics.median(getattr(r, name) for r in runs if r.scraped)
        off = statistics.median(getattr(r, name) for r in runs if not r.scraped)
        print(f"  {name:<22} {on:10.1f} / {off:10.1f} = {on / off if off else float('nan'):.2f}x")


if __name__ == "__main__":
    main()
