"""kneepoint's measurement beside an independent tool on the same real server: `kneepoint
sweep`'s knee search (the study's, over HTTP, as `tune` and `diagnose` run it) and `vllm bench
serve` at the same rates, with as many requests of the same lengths, on one vLLM CPU-build
server serving the tests' tiny Llama.

Both send evenly spaced arrivals (kneepoint's `constant` arrival process, vLLM bench's gamma
arrivals of burstiness 10,000: gaps within 1% of each other), so that each rate's realised
load is the one offered: with Poisson gaps, a point of a few hundred requests runs 5-10%
above or below its rate by chance, and the two tools would draw different chances.

vLLM bench runs each rate twice (different prompts): near the knee a small server's
throughput varies from run to run by more than any bias of either tool, so kneepoint's
distance from vLLM bench is read beside vLLM bench's distance from itself.

Per rate it prints output tok/s (both as vLLM bench counts it, every output token over the
time from the first send to the last answer, and kneepoint's own steady-state rate, the
tokens arriving in the middle 80% of that span), TTFT p50/p99, ITL p50/p95 and TPOT p50 from
each tool and each tool's SLO verdict; then each tool's SLO capacity (the same interpolation
over its own verdicts). kneepoint counts TTFT from each request's scheduled send, vLLM bench
from the actual send, so where kneepoint's client ran late the two may differ (kneepoint then
says so: such points are not counted). Goals: output tok/s within 3% of vLLM bench's, or no
further from it than its second run is, at every rate; the same verdict at every rate at
least 20% from the knee; capacities within 10%.

Run: .venv/bin/python benchmarks/vllm_bench_agreement.py [--kv-mib 16]   (about 6 minutes)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import vllm_cpu

from kneepoint.agent.logs import configure_logging
from kneepoint.config import load_study
from kneepoint.load.capacity import interpolate_capacity
from kneepoint.load.size import PointSize
from kneepoint.probes.study_knee import study_knee_search
from kneepoint.probes.targets import PointArtifacts, open_target
from kneepoint.records.measure import RequestRecord
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepPoint

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"
NEAR_KNEE = 0.2
EVEN = 10_000.0
"""vLLM bench's burstiness (gamma shape) for evenly spaced arrivals: gaps within 1%."""
GOAL_TOKENS, GOAL_CAPACITY = 0.03, 0.10


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


def _kneepoint(
    study: StudySpec, folder: Path
) -> tuple[list[SweepPoint], dict[float, tuple[RequestRecord, ...]]]:
    """The study's knee search: its counted points, and the requests each rate sent."""
    sent: dict[float, tuple[RequestRecord, ...]] = {}

    def keep(artifacts: PointArtifacts) -> None:
        sent[artifacts.rate_rps] = artifacts.records

    size = PointSize.for_study(study, study.tuning.screen_seconds)
    with open_target(study, study.engine, folder, size, keep) as target:
        result = study_knee_search(target.probe, study, study.engine)
    counted = sorted((p for p in result.points if p.counted), key=lambda p: p.rate_rps)
    return counted, sent


def as_bench_counts(records: Sequence[RequestRecord]) -> float:
    """Output tokens per second as vLLM bench counts them: every completed request's output
    tokens over the time from the first send to the last answer."""
    done = [r for r in records if r.ok and r.end_s is not None]
    if not done:
        return 0.0
    span = max(r.end_s or 0.0 for r in done) - min(r.sent_s for r in records)
    return sum(r.output_tokens for r in done) / span if span > 0 else 0.0


def _row(
    point: SweepPoint, records: Sequence[RequestRecord], bench: vllm_cpu.BenchRun,
    limits: Limits,
) -> list[str]:  # fmt: skip
    (dists,) = point.point.dists.values()
    kp_tok = as_bench_counts(records)
    vb_tok = _tokens(bench)
    pairs = [(dists["ttft"].p50_ms, bench.get("p50_ttft_ms")),
             (dists["ttft"].p99_ms, bench.get("p99_ttft_ms")),
             (dists["itl"].p50_ms, bench.get("p50_itl_ms")),
             (dists["itl"].p95_ms, bench.get("p95_itl_ms")),
             (dists["tpot"].p50_ms, bench.get("p50_tpot_ms"))]  # fmt: skip
    cells = [f"{a:8.1f} {b:8.1f}" for a, b in pairs]
    steady = point.point.output_tokens_per_s or 0.0
    tokens = f"{kp_tok:6.0f} {vb_tok:6.0f} {(kp_tok - vb_tok) / vb_tok:+6.1%} {steady:6.0f}"
    verdicts = f"{_verdict(point.margin)}/{_verdict(_margin(bench, limits))}"
    return [f"{point.rate_rps:6.2f}", tokens, *cells, verdicts]


def _margin(bench: vllm_cpu.BenchRun, limits: Limits) -> float:
    """vLLM bench's worst observed/limit ratio over the SLO, as kneepoint's margin."""
    return max(bench.get(f"p{q}_{_BENCH_NAMES[m]}_ms") / limit for (m, q), limit in limits.items())


def _verdict(margin: float) -> str:
    return "meets" if margin <= 1.0 else "misses"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-mib", type=int, default=16, help="the server's KV pool")
    args = parser.parse_args()
    configure_logging(level="warning")
    started = time.monotonic()
    venv = vllm_cpu.vllm_venv()
    with tempfile.TemporaryDirectory() as tmp:
        model = vllm_cpu.tiny_model(venv, Path(tmp) / "tiny-llama")
        config = vllm_cpu.engine(model, args.kv_mib * 2**20)
        with vllm_cpu.served(venv, config) as endpoint:
            study = _study(endpoint.url, model)
            limits = _limits(study)
            points, sent = _kneepoint(study, Path(tmp) / "sweep")
            benches, again = ([vllm_cpu.bench_serve(venv, endpoint, model, p.rate_rps,
                                                    len(sent[p.rate_rps]), input_tokens=256,
                                                    output_tokens=64, seed=seed + i,
                                                    burstiness=EVEN)
                               for i, p in enumerate(points)] for seed in (0, 100))  # fmt: skip
    report(
        points,
        [sent[p.rate_rps] for p in points],
        benches,
        again,
        limits=limits,
        kv_mib=args.kv_mib,
    )
    print(f"wall time {time.monotonic() - started:.0f} s")


def report(
    points: list[SweepPoint], sent: list[tuple[RequestRecord, ...]],
    benches: list[vllm_cpu.BenchRun], again: list[vllm_cpu.BenchRun], *,
    limits: Limits, kv_mib: int,
) -> None:  # fmt: skip
    slo = ", ".join(f"{m.upper()} p{q} {limit:g} ms" for (m, q), limit in limits.items())
    print(f"tiny Llama, KV {kv_mib} MiB, 256 in / 64 out, SLO {slo}; each cell: kneepoint, "
          "vllm bench")  # fmt: skip
    print(f"{'rate':>6} {'output tok/s (diff, steady)':>27} {'TTFT p50':>17} {'TTFT p99':>17} "
          f"{'ITL p50':>17} {'ITL p95':>17} {'TPOT p50':>17}  verdict  bench again")  # fmt: skip
    for point, records, bench, second in zip(points, sent, benches, again, strict=True):
        print(" ".join(_row(point, records, bench, limits)), f"{_tokens(second):6.0f} "
              f"{_tokens(second) / _tokens(bench) - 1:+6.1%}")  # fmt: skip
    kp = interpolate_capacity([(p.rate_rps, p.margin) for p in points])
    vb = interpolate_capacity([(b.rate_rps, _margin(b, limits)) for b in benches])
    knee = kp or 0.0
    far = [(p, b) for p, b in zip(points, benches, strict=True)
           if knee and abs(p.rate_rps / knee - 1) >= NEAR_KNEE]  # fmt: skip
    agree = sum((p.margin <= 1) == (_margin(b, limits) <= 1) for p, b in far)
    apart = [abs(as_bench_counts(r) / _tokens(b) - 1) for r, b in zip(sent, benches, strict=True)]
    itself = [abs(_tokens(a) / _tokens(b) - 1) for a, b in zip(again, benches, strict=True)]
    within = sum(k <= max(GOAL_TOKENS, v) for k, v in zip(apart, itself, strict=True))
    gap = abs(kp / vb - 1) if kp and vb else float("nan")
    print(f"\nSLO capacity: kneepoint {kp or 0:.2f} req/s, vllm bench {vb or 0:.2f} req/s "
          f"({gap:.1%} apart; goal within {GOAL_CAPACITY:.0%})")  # fmt: skip
    print(f"verdicts at rates at least {NEAR_KNEE:.0%} from the knee: {agree} of {len(far)} "
          "agree (goal: all)")  # fmt: skip
    print(f"output tok/s: kneepoint vs vllm bench worst {max(apart):.1%}, vllm bench vs its "
          f"second run worst {max(itself):.1%}; {within} of {len(apart)} rates within "
          f"{GOAL_TOKENS:.0%} or within vllm bench's own spread (goal: all)")  # fmt: skip


def _tokens(bench: vllm_cpu.BenchRun) -> float:
    return bench.get("output_throughput")


if __name__ == "__main__":
    main()
