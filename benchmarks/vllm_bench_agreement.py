"""kneepoint's measurement beside an independent tool on the same real server: `kneepoint
sweep`'s knee search (the study's, over HTTP, as `tune` and `diagnose` run it) and `vllm bench
serve` at the same rates, with as many requests of the same lengths, on one vLLM CPU-build
server serving the tests' tiny Llama.

Both send evenly spaced arrivals (kneepoint's `constant` arrival process, vLLM bench's gamma
arrivals of burstiness 10,000: gaps within 1% of each other), so that each rate's realised
load is the one offered: with Poisson gaps, a point of a few hundred requests runs 5-10%
above or below its rate by chance, and the two tools would draw different chances.

The server is warmed first (ten seconds of vLLM bench past its knee); then, at each rate
kneepoint's search counted, vLLM bench and kneepoint take turns until each has measured it
``--runs`` times (3; the search's point is kneepoint's first, vLLM bench runs first and
last). Near the knee a small server's throughput moves from run to run by more than any bias
of either tool (nine runs in a row at 48 req/s read 1,757-2,019 tok/s), so the two tools'
means are compared against the standard error of their difference. kneepoint's own load
generator is not what slows the server: it used 1.1 s of CPU per 10-second point at
40 req/s, vLLM bench 8.5 s a run, its start-up included.

Per rate it prints output tok/s as vLLM bench counts it (every output token over the time
from the first send to the last answer): each tool's mean and range, the means' difference
and twice its standard error; TTFT p50/p99, ITL p50 and TPOT p50 from kneepoint's search point
and vLLM bench's first run, and their verdicts; then each tool's SLO capacity (the same
interpolation over its own verdicts). kneepoint counts TTFT from each request's scheduled
send, vLLM bench from the actual send, so where kneepoint's client ran late the two may differ
(kneepoint then says so: such points are not counted). Goals: output tok/s within 3% of vLLM
bench's, or within twice the standard error of the means' difference, at every rate; the same
verdict at every rate at least 20% from the knee; capacities within 10%.

Run: .venv/bin/python benchmarks/vllm_bench_agreement.py [--kv-mib 16] [--runs 3]   (~12 minutes)
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import versions
import vllm_cpu

from kneepoint.config import load_study
from kneepoint.load.capacity import interpolate_capacity
from kneepoint.load.size import PointSize
from kneepoint.measure.study_knee import study_knee_search
from kneepoint.probes.backends import Endpoint, open_target
from kneepoint.probes.runtime import configure_logging
from kneepoint.records import PointArtifacts
from kneepoint.records.measure import RequestRecord
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepPoint

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"
NEAR_KNEE = 0.2
EVEN = 10_000.0
"""vLLM bench's burstiness (gamma shape) for evenly spaced arrivals: gaps within 1%."""
GOAL_TOKENS, GOAL_CAPACITY = 0.03, 0.10
WARM_RPS, WARM_PROMPTS = 64.0, 640
"""A fresh CPU-build server's first heavy run was its slowest in each of two interleaved
A/B series at 40 req/s (1,700 and 1,763 output tok/s, then 1,768-2,106): both tools are
compared on a server warmed by ten seconds past its knee first."""


def _study(url: str, model: Path) -> StudySpec:
    return load_study(STUDY, [f"model={model / 'config.json'}", f"engine.model={model}",
                              f"backend={{kind: attach, url: '{url}'}}",
                              "workload.arrival={kind: constant}"])  # fmt: skip


Limits = dict[tuple[str, int], float]
_BENCH_NAMES = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2el"}
"""kneepoint's metric names -> vLLM bench's (its percentiles are ``p{q}_{name}_ms``)."""


def _limits(study: StudySpec) -> Limits:
    assert study.slo is not None and study.slo.default is not None
    return study.slo.default.limits_ms()


Runs = list[tuple[RequestRecord, ...]]


@dataclass
class Measured:
    """Per counted rate of kneepoint's search: its point, the requests of each kneepoint
    point at the rate (the search's first), and vLLM bench's runs at it."""

    points: list[SweepPoint]
    kneepoint: list[Runs]
    bench: list[list[vllm_cpu.BenchRun]]


def _measure(
    study: StudySpec, folder: Path, venv: Path, endpoint: Endpoint, model: Path, *, runs: int
) -> Measured:  # fmt: skip
    """The study's knee search; then, rate by rate, vLLM bench and kneepoint in turn until
    each has ``runs`` (vLLM bench first and last): the server's drift over the run falls on
    both tools alike."""
    sent: dict[float, Runs] = {}

    def keep(artifacts: PointArtifacts) -> None:
        sent.setdefault(artifacts.rate_rps, []).append(artifacts.records)

    size = PointSize.for_study(study, study.tuning.screen_seconds)
    with open_target(study, study.engine, folder, size, keep) as target:
        result = study_knee_search(target.probe, study, study.engine)
        points = sorted((p for p in result.points if p.counted), key=lambda p: p.rate_rps)
        found = Measured(points, [[sent[p.rate_rps][-1]] for p in points], [])
        for i, (point, mine) in enumerate(zip(points, found.kneepoint, strict=True)):
            bench = []
            for j in range(runs):
                bench.append(_bench(venv, endpoint, model, point.rate_rps, len(mine[0]),
                                    seed=100 * j + i))  # fmt: skip
                if len(mine) < runs:
                    target.probe(point.rate_rps, j + 1)
                    mine.append(sent[point.rate_rps][-1])
            found.bench.append(bench)
    return found


def _bench(
    venv: Path, endpoint: Endpoint, model: Path, rate_rps: float, prompts: int, *, seed: int
) -> vllm_cpu.BenchRun:  # fmt: skip
    return vllm_cpu.bench_serve(venv, endpoint, model, rate_rps, prompts, input_tokens=256,
                                output_tokens=64, seed=seed, burstiness=EVEN)  # fmt: skip


def as_bench_counts(records: Sequence[RequestRecord]) -> float:
    """Output tokens per second as vLLM bench counts them: every completed request's output
    tokens over the time from the first send to the last answer."""
    done = [r for r in records if r.ok and r.end_s is not None]
    if not done:
        return 0.0
    span = max(r.end_s or 0.0 for r in done) - min(r.sent_s for r in records)
    return sum(r.output_tokens for r in done) / span if span > 0 else 0.0


def _row(
    point: SweepPoint, runs: Runs, benches: list[vllm_cpu.BenchRun], limits: Limits
) -> list[str]:  # fmt: skip
    (dists,) = point.point.dists.values()
    bench = benches[0]
    pairs = [(dists["ttft"].p50_ms, bench.get("p50_ttft_ms")),
             (dists["ttft"].p99_ms, bench.get("p99_ttft_ms")),
             (dists["itl"].p50_ms, bench.get("p50_itl_ms")),
             (dists["tpot"].p50_ms, bench.get("p50_tpot_ms"))]  # fmt: skip
    cells = [f"{a:8.1f} {b:8.1f}" for a, b in pairs]
    kp, vb = [as_bench_counts(r) for r in runs], [_tokens(b) for b in benches]
    gap, noise = _apart(kp, vb)
    tokens = (f"{statistics.fmean(kp):5.0f} ({min(kp):4.0f}-{max(kp):4.0f}) "
              f"{statistics.fmean(vb):5.0f} ({min(vb):4.0f}-{max(vb):4.0f}) "
              f"{gap:+6.1%} {noise:5.1%}")  # fmt: skip
    verdicts = f"{_verdict(point.margin)}/{_verdict(_margin(bench, limits))}"
    return [f"{point.rate_rps:6.2f}", tokens, *cells, verdicts]


def _apart(kp: Sequence[float], vb: Sequence[float]) -> tuple[float, float]:
    """kneepoint's mean over vLLM bench's, less 1, and twice the standard error of the two
    means' difference as a share of vLLM bench's (a difference inside it is noise)."""
    error = math.sqrt(statistics.variance(kp) / len(kp) + statistics.variance(vb) / len(vb))
    base = statistics.fmean(vb)
    return statistics.fmean(kp) / base - 1, 2 * error / base


def _margin(bench: vllm_cpu.BenchRun, limits: Limits) -> float:
    """vLLM bench's worst observed/limit ratio over the SLO, as kneepoint's margin."""
    return max(bench.get(f"p{q}_{_BENCH_NAMES[m]}_ms") / limit for (m, q), limit in limits.items())


def _verdict(margin: float) -> str:
    return "meets" if margin <= 1.0 else "misses"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-mib", type=int, default=16, help="the server's KV pool")
    parser.add_argument("--runs", type=int, default=3, help="per tool per rate (at least 2)")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    started = time.monotonic()
    venv = vllm_cpu.vllm_venv()
    with tempfile.TemporaryDirectory() as tmp:
        model = vllm_cpu.tiny_model(venv, Path(tmp) / "tiny-llama")
        config = vllm_cpu.engine(model, args.kv_mib * 2**20)
        with vllm_cpu.served(venv, config) as endpoint:
            study = _study(endpoint.url, model)
            _bench(venv, endpoint, model, WARM_RPS, WARM_PROMPTS, seed=999)
            found = _measure(
                study, Path(tmp) / "sweep", venv, endpoint, model, runs=max(2, args.runs)
            )
    report(found, _limits(study), args.kv_mib)
    print(f"wall time {time.monotonic() - started:.0f} s")


def report(found: Measured, limits: Limits, kv_mib: int) -> None:
    slo = ", ".join(f"{m.upper()} p{q} {limit:g} ms" for (m, q), limit in limits.items())
    print(f"tiny Llama, KV {kv_mib} MiB, 256 in / 64 out, SLO {slo}; output tok/s: kneepoint's "
          "mean (range), vLLM bench's, the means' difference and twice its standard error; "
          "each latency cell: kneepoint's search point, vLLM bench's first run")  # fmt: skip
    print(f"{'rate':>6} {'output tok/s':>45} {'TTFT p50':>17} {'TTFT p99':>17} "
          f"{'ITL p50':>17} {'TPOT p50':>17}  verdict")  # fmt: skip
    rows = list(zip(found.points, found.kneepoint, found.bench, strict=True))
    for point, runs, benches in rows:
        print(" ".join(_row(point, runs, benches, limits)))
    kp = interpolate_capacity([(p.rate_rps, p.margin) for p in found.points])
    vb = interpolate_capacity([(b[0].rate_rps, _margin(b[0], limits)) for b in found.bench])
    knee = kp or 0.0
    far = [(p, b[0]) for p, _, b in rows if knee and abs(p.rate_rps / knee - 1) >= NEAR_KNEE]
    agree = sum((p.margin <= 1) == (_margin(b, limits) <= 1) for p, b in far)
    gaps = [_apart([as_bench_counts(r) for r in runs], [_tokens(b) for b in benches])
            for _, runs, benches in rows]  # fmt: skip
    within = sum(abs(gap) <= max(GOAL_TOKENS, noise) for gap, noise in gaps)
    gap = abs(kp / vb - 1) if kp and vb else float("nan")
    print(f"\nSLO capacity: kneepoint {kp or 0:.2f} req/s, vllm bench {vb or 0:.2f} req/s "
          f"({gap:.1%} apart; goal within {GOAL_CAPACITY:.0%})")  # fmt: skip
    print(f"verdicts at rates at least {NEAR_KNEE:.0%} from the knee: {agree} of {len(far)} "
          "agree (goal: all)")  # fmt: skip
    worst = max(gaps, key=lambda g: abs(g[0]))
    print(f"output tok/s, means of {len(rows[0][1])} runs each: worst {worst[0]:+.1%} apart "
          f"(noise {worst[1]:.1%}); {within} of {len(gaps)} rates within {GOAL_TOKENS:.0%} "
          "or within twice the standard error of the means' difference (goal: all)")  # fmt: skip


def _tokens(bench: vllm_cpu.BenchRun) -> float:
    return bench.get("output_throughput")


if __name__ == "__main__":
    main()
