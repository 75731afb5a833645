"""kneepoint's measurement beside an independent tool on the same real server: `kneepoint
sweep`'s knee search (the study's, over HTTP, as `tune` and `diagnose` run it) and `vllm bench
serve` at the same rates, with as many requests of the same lengths, on one vLLM CPU-build
server serving the tests' tiny Llama.

Per rate it prints output tok/s, TTFT p50/p99, ITL p50/p95 and TPOT p50 from each tool and
each tool's SLO verdict; then each tool's SLO capacity (the same interpolation over its own
verdicts). kneepoint counts TTFT from each request's scheduled send, vLLM bench from the
actual send, so where kneepoint's client ran late the two may differ (kneepoint then says
so: such points are not counted). Goals: output tok/s within 3%, the same verdict at every
rate at least 20% from the knee, capacities within 10%.

Run: .venv/bin/python benchmarks/vllm_bench_agreement.py [--kv-mib 16]   (about 10 minutes)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import vllm_cpu

from kneepoint.config import load_study
from kneepoint.load.capacity import interpolate_capacity
from kneepoint.load.size import PointSize
from kneepoint.probes.study_knee import study_knee_search
from kneepoint.probes.targets import PointArtifacts, open_target
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepPoint

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"
NEAR_KNEE = 0.2
GOAL_TOKENS, GOAL_CAPACITY = 0.03, 0.10


def _study(url: str, model: Path) -> StudySpec:
    return load_study(STUDY, [f"model={model / 'config.json'}", f"engine.model={model}",
                              f"backend={{kind: attach, url: '{url}'}}"])  # fmt: skip


def _limits(study: StudySpec) -> tuple[float, float]:
    assert study.slo is not None and study.slo.default is not None
    limits = study.slo.default.limits_ms()
    return limits[("ttft", 99)], limits[("itl", 95)]


def _kneepoint(study: StudySpec, folder: Path) -> tuple[list[SweepPoint], dict[float, int]]:
    """The study's knee search: its counted points, and how many requests each rate sent."""
    sent: dict[float, int] = {}

    def keep(artifacts: PointArtifacts) -> None:
        sent[artifacts.rate_rps] = len(artifacts.records)

    size = PointSize.for_study(study, study.tuning.screen_seconds)
    with open_target(study, study.engine, folder, size, keep) as target:
        result = study_knee_search(target.probe, study, study.engine)
    counted = sorted((p for p in result.points if p.counted), key=lambda p: p.rate_rps)
    return counted, sent


def _row(point: SweepPoint, bench: vllm_cpu.BenchRun, limits: tuple[float, float]) -> list[str]:
    (dists,) = point.point.dists.values()
    kp_tok = point.point.output_tokens_per_s or 0.0
    vb_tok = bench.get("output_throughput")
    pairs = [(dists["ttft"].p50_ms, bench.get("p50_ttft_ms")),
             (dists["ttft"].p99_ms, bench.get("p99_ttft_ms")),
             (dists["itl"].p50_ms, bench.get("p50_itl_ms")),
             (dists["itl"].p95_ms, bench.get("p95_itl_ms")),
             (dists["tpot"].p50_ms, bench.get("p50_tpot_ms"))]  # fmt: skip
    cells = [f"{a:8.1f} {b:8.1f}" for a, b in pairs]
    tokens = f"{kp_tok:6.0f} {vb_tok:6.0f} {(kp_tok - vb_tok) / vb_tok:+6.1%}"
    verdicts = f"{_verdict(point.margin)}/{_verdict(_margin(bench, limits))}"
    return [f"{point.rate_rps:6.2f}", tokens, *cells, verdicts]


def _margin(bench: vllm_cpu.BenchRun, limits: tuple[float, float]) -> float:
    ttft, itl = limits
    return max(bench.get("p99_ttft_ms") / ttft, bench.get("p95_itl_ms") / itl)


def _verdict(margin: float) -> str:
    return "meets" if margin <= 1.0 else "misses"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-mib", type=int, default=16, help="the server's KV pool")
    args = parser.parse_args()
    started = time.monotonic()
    venv = vllm_cpu.vllm_venv()
    with tempfile.TemporaryDirectory() as tmp:
        model = vllm_cpu.tiny_model(venv, Path(tmp) / "tiny-llama")
        config = vllm_cpu.engine(model, args.kv_mib * 2**20)
        with vllm_cpu.served(venv, config) as endpoint:
            study = _study(endpoint.url, model)
            limits = _limits(study)
            points, sent = _kneepoint(study, Path(tmp) / "sweep")
            benches = [vllm_cpu.bench_serve(venv, endpoint, model, p.rate_rps, sent[p.rate_rps],
                                            input_tokens=256, output_tokens=64, seed=i)
                       for i, p in enumerate(points)]  # fmt: skip
    report(points, benches, limits, args.kv_mib)
    print(f"wall time {time.monotonic() - started:.0f} s")


def report(
    points: list[SweepPoint], benches: list[vllm_cpu.BenchRun], limits: tuple[float, float],
    kv_mib: int,
) -> None:  # fmt: skip
    print(f"tiny Llama, KV {kv_mib} MiB, 256 in / 64 out, SLO TTFT p99 {limits[0]:g} ms, "
          f"ITL p95 {limits[1]:g} ms; each cell: kneepoint, vllm bench")  # fmt: skip
    print(f"{'rate':>6} {'output tok/s (diff)':>20} {'TTFT p50':>17} {'TTFT p99':>17} "
          f"{'ITL p50':>17} {'ITL p95':>17} {'TPOT p50':>17}  verdict")  # fmt: skip
    for point, bench in zip(points, benches, strict=True):
        print(" ".join(_row(point, bench, limits)))
    kp = interpolate_capacity([(p.rate_rps, p.margin) for p in points])
    vb = interpolate_capacity([(b.rate_rps, _margin(b, limits)) for b in benches])
    knee = kp or 0.0
    far = [(p, b) for p, b in zip(points, benches, strict=True)
           if knee and abs(p.rate_rps / knee - 1) >= NEAR_KNEE]  # fmt: skip
    agree = sum((p.margin <= 1) == (_margin(b, limits) <= 1) for p, b in far)
    below = [(p, b) for p, b in zip(points, benches, strict=True) if knee and p.rate_rps < knee]
    worst = max((abs((p.point.output_tokens_per_s or 0) / b.get("output_throughput") - 1)
                 for p, b in below), default=float("nan"))  # fmt: skip
    gap = abs(kp / vb - 1) if kp and vb else float("nan")
    print(f"\nSLO capacity: kneepoint {kp or 0:.2f} req/s, vllm bench {vb or 0:.2f} req/s "
          f"({gap:.1%} apart; goal within {GOAL_CAPACITY:.0%})")  # fmt: skip
    print(f"verdicts at rates at least {NEAR_KNEE:.0%} from the knee: {agree} of {len(far)} "
          "agree (goal: all)")  # fmt: skip
    print(f"output tok/s below the knee: worst {worst:.1%} apart (goal within {GOAL_TOKENS:.0%})")


if __name__ == "__main__":
    main()
