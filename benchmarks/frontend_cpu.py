"""API-server scale-out on a real engine: does a second API server help vLLM's CPU build, and
does the rule say the same?

vLLM's CPU build serving the tests' tiny Llama streams 128-token answers to 64-token prompts
(the API server's work, a chunk a token, is most of what a request costs outside the
engine). `kneepoint sweep` measures the study's SLO capacity with one API server and with two
(`vllm serve --api-server-count 2`), alternating, ``--rounds`` times each; the rule
(``kneepoint.policies.pruning.frontend_effects``) prices the second server from the first
one-server sweep's knee: the busiest API-server process's CPU and the cores the host left
idle there. One line per sweep (capacity, the API server's CPU and the idle cores at the
knee), then the rule's word beside the measured ratio.

Run: .venv/bin/python benchmarks/frontend_cpu.py [--work DIR] [--rounds N]
     (~20 min for 2 rounds on a 2-core AVX-512 host; run it alone: anything beside it
     takes the cores the API servers compete for)
Goal (issue "Step 18"): the api_server_count rule agrees in direction with the measured A/B.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import vllm_cpu

sys.path.insert(0, str(vllm_cpu.REPO))
import versions

from kneepoint.config import knob_catalogue, load_study
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.policies.diagnosis.observe import observe_study
from kneepoint.policies.pruning.prune import prune
from kneepoint.records.knobs import KnobCatalogue
from kneepoint.records.sweep import SweepResult
from tests.support.real_vllm.host_speed import kv_study_sizing, measure_host

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"
KNEEPOINT = str(vllm_cpu.REPO / ".venv" / "bin" / "kneepoint")


def study_sets(model: Path, venv: Path, sized: list[str]) -> list[str]:
    """The CPU tier's study, launched by `vllm serve` (the API-server module serves from one
    process whatever --api-server-count says), with a pool that does not bind and long
    streamed answers."""
    return [
        f"model={model / 'config.json'}", f"engine.model={model}",
        f"backend.command=[{venv / 'bin' / 'vllm'}, serve]", "backend.model_as=positional",
        *sized, "engine.kv_cache_memory_bytes=67108864", "measurement.knee_tolerance=0.05",
        "workload.classes=[{name: c, input_tokens: {kind: fixed, tokens: 64}, "
        "output_tokens: {kind: fixed, tokens: 128}}]",
        "objective={kind: slo_capacity}", "search.knobs=[api_server_count]",
    ]  # fmt: skip


def sweep(sets: list[str], servers: int, out: Path) -> SweepResult:
    extra = [] if servers == 1 else [f"engine.api_server_count={servers}"]
    argv = [KNEEPOINT, "sweep", str(STUDY), "--out", str(out)]
    argv += [arg for override in [*sets, *extra] for arg in ("--set", override)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kneepoint sweep failed:\n{done.stderr[-3000:]}")
    return SweepResult.model_validate_json(out.read_text())


def knee_readings(result: SweepResult) -> str:
    """The API server's CPU and the idle cores at the highest rate that met the SLO."""
    met = [p.point for p in result.points if p.point.meets_slo and not p.superseded]
    if not met:
        return "no rate met the SLO"
    s = max(met, key=lambda p: p.rate_rps).signals
    frontend = "unread" if s.frontend_cpu_pct is None else f"{s.frontend_cpu_pct:.0f}%"
    idle = "unread" if s.host_idle_cores is None else f"{s.host_idle_cores:.2f}"
    return f"busiest API server {frontend} of a core, {idle} cores idle"


def rule_says(out: Path) -> str:
    """The api_server_count rule's word on the one-server sweep written to ``out``."""
    study = load_study(out.with_suffix(".study.yaml"))
    result = SweepResult.model_validate_json(out.read_text())
    context = context_of(observe_study(study, study.engine, result))
    diagnosis = diagnose(context)
    knob = knob_catalogue().get("api_server_count")
    assert knob is not None
    pruning = prune(diagnosis, context, KnobCatalogue(knobs=(knob,)), backend=study.backend)
    verdict = diagnosis.headline()
    for candidate in pruning.candidates:
        return f"{verdict}; priced {candidate.predicted_ratio:.2f}x: {candidate.reason}"
    (out_reason,) = [r.reason for r in pruning.ruled_out]
    return f"{verdict}; ruled out: {out_reason}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("frontend-cpu"))
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(versions.line(), flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    venv = vllm_cpu.vllm_venv()
    model = vllm_cpu.kept_tiny_model(venv, args.work)
    speed = measure_host(venv, model)
    print(f"host: {speed.summary()}", flush=True)
    sets = study_sets(model, venv, [s for s in kv_study_sizing(speed) if "workload." not in s])
    capacity: dict[int, list[float]] = {1: [], 2: []}
    for round_ in range(args.rounds):
        for servers in (1, 2):
            out = args.work / f"servers{servers}-r{round_}.json"
            result = sweep(sets, servers, out)
            capacity[servers].append(float(result.capacity_rps or 0.0))
            print(f"round {round_} api servers {servers}: {capacity[servers][-1]:6.2f} req/s; "
                  f"{knee_readings(result)}", flush=True)  # fmt: skip
    ratios = [two / one for one, two in zip(capacity[1], capacity[2], strict=True) if one > 0]
    print(f"rule: {rule_says(args.work / 'servers1-r0.json')}")
    print(f"measured 2 servers / 1: {statistics.fmean(ratios):.2f}x "
          f"(by round: {', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip


if __name__ == "__main__":
    main()
