"""kneepoint against the tuner its users already have, on a real engine: vLLM's auto_tune
procedure (benchmarks/autotune_port.py), vLLM's own intent flag (`--performance-mode
throughput` and `interactivity` on the study's start) and `kneepoint tune` on one study and one
server (vLLM's CPU build serving the tests' tiny Llama), all judged by an independent tool.

The study is the real tier's KV-starved one (tests/fixtures/studies/cpu-tiny-kv.yaml) sized to
this host as the tier sizes it (tests/support/real_vllm/host_speed.py: 128 / 32-token requests,
a pool of a quarter of the knee's sequences, a TTFT p99 limit from the host's speed); ``--roomy``
serves the same study with a pool that does not bind (the host probe's 64 MiB). The work
(the model, kneepoint's run folder, results.json) stays in ``--work``; a rerun resumes there.
kneepoint searches the KV pool, max_num_seqs, max_num_batched_tokens and the performance mode,
with auto_tune's measured device time as its budget; its own stop decides how much of it to
spend.

The judge: for the start, each mode and each tool's winner, a fresh server, a warm-up run, then
`vllm bench serve` at one ladder of rates (fractions of the host's closed-loop throughput,
Poisson arrivals, ``--judge-runs`` runs a rate, about 10 s each), up the ladder until two rates
in a row miss. A rate meets the SLO when every run's percentiles do; SLO capacity is the same
interpolation kneepoint uses, over the judge's verdicts. Device time is server-up seconds
(starts included) for both tools. results.json is written after every phase.

Run: .venv/bin/python benchmarks/peer_autotune.py [--roomy] [--inf-prompts 1000]
     [--step-prompts 100] [--work DIR]      (~1.5-2 h on a 2-core AVX2-only host)
Goal: kneepoint's winner at least auto_tune's and every mode's by the judge, in at most half
auto_tune's device time.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import vllm_cpu
from autotune_port import AutoTune, Bench, auto_tune, cell_config

sys.path.insert(0, str(vllm_cpu.REPO))
import versions

from kneepoint.config import load_study
from kneepoint.load.capacity import interpolate_capacity
from kneepoint.probes.runtime import configure_logging
from kneepoint.records.engine import EngineConfig
from tests.support.real_vllm.host_speed import (
    ANSWER_TOKENS,
    PROMPT_TOKENS,
    HostSpeed,
    kv_study_sizing,
    measure_host,
)  # fmt: skip

STUDY = vllm_cpu.REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-kv.yaml"
KNOBS = (
    "search.knobs=[kv_cache_memory_bytes, max_num_seqs, max_num_batched_tokens, performance_mode]"
)
MODES = ("throughput", "interactivity")
"""`--performance-mode`s judged beside the tools (balanced, vLLM's default, is the start)."""
LADDER = (0.3, 0.45, 0.6, 0.75, 0.9, 1.05, 1.2, 1.4, 1.6, 1.85)
"""The judge's rates as shares of the host's closed-loop throughput (128 / 32 tokens)."""
RUN_S, MIN_PROMPTS = 10.0, 30


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def study_sets(model: Path, venv: Path, speed: HostSpeed, roomy: bool) -> list[str]:
    command = f"[{venv / 'bin' / 'python'}, -m, vllm.entrypoints.openai.api_server]"
    sets = [f"model={model / 'config.json'}", f"engine.model={model}",
            f"backend.command={command}", *kv_study_sizing(speed), KNOBS]  # fmt: skip
    return [*sets, "engine.kv_cache_memory_bytes=67108864"] if roomy else sets


def run_kneepoint(sets: list[str], budget_s: float, runs: Path) -> dict[str, Any]:
    """`kneepoint tune` with ``budget_s`` of device time: its winner, the device time its
    ledger counted, and how much of it came before the winner was promoted (what the run
    needed to find it; the rest is the budget stop making sure nothing better is near)."""
    argv = [str(vllm_cpu.REPO / ".venv" / "bin" / "kneepoint"), "tune", str(STUDY),
            "--runs-dir", str(runs)]  # fmt: skip
    budget = f"budget={{max_device_hours: {budget_s / 3600:.4f}}}"
    for override in [*sets, budget]:
        argv += ["--set", override]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kneepoint tune failed:\n{done.stderr[-3000:]}")
    (folder,) = runs.iterdir()
    events = [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]
    found = max(i for i, e in enumerate(events) if e["event"] in ("baseline", "promoted"))
    winner = EngineConfig.model_validate(events[found]["config"])
    say(f"kneepoint: {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''}")
    return {
        "winner": winner.model_dump(exclude_none=True),
        "device_s": _device_s(events),
        "to_winner_s": _device_s(events[: found + 1]),
        "finished": next((e["detail"] for e in events if e["event"] == "finished"), None),
    }


def _device_s(events: list[dict[str, Any]]) -> float:
    return sum(float(e.get("device_s", 0.0)) for e in events)


def judge(bench: Bench, config: EngineConfig, rates: list[float], runs: int) -> dict[str, object]:
    """SLO capacity of ``config`` by `vllm bench serve` on a fresh, warmed server."""
    seen: list[tuple[float, float]] = []
    with vllm_cpu.served(bench.venv, config) as endpoint:
        middle = rates[len(rates) // 2]
        bench.run(endpoint, middle, _prompts(middle), seed=999)  # warm-up
        misses = 0
        for i, rate in enumerate(rates):
            worst = max(bench.margin(bench.run(endpoint, rate, _prompts(rate), 10 * i + j))
                        for j in range(runs))  # fmt: skip
            seen.append((rate, worst))
            misses = misses + 1 if worst > 1.0 else 0
            if misses == 2:
                break
    capacity = interpolate_capacity(seen)
    return {"capacity_rps": capacity, "points": seen}


def _prompts(rate: float) -> int:
    return max(MIN_PROMPTS, math.ceil(RUN_S * rate))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roomy", action="store_true", help="a KV pool that does not bind")
    parser.add_argument("--inf-prompts", type=int, default=1000)
    parser.add_argument("--step-prompts", type=int, default=100)
    parser.add_argument("--judge-runs", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("peer-autotune"),
                        help="the model, kneepoint's run and results.json; a rerun resumes "
                             "after the last phase kept there")  # fmt: skip
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    args.work.mkdir(parents=True, exist_ok=True)
    out = args.work / "results.json"
    results: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {}

    def keep(key: str, value: object) -> None:
        results[key] = value
        out.write_text(json.dumps(results, indent=1, default=str))

    venv = vllm_cpu.vllm_venv()
    model = vllm_cpu.kept_tiny_model(venv, args.work)
    if "host" not in results:
        keep("host", asdict(measure_host(venv, model)))
    speed = _host(results["host"])
    say(f"host: {speed.summary()}")
    sets = study_sets(model, venv, speed, args.roomy)
    study = load_study(STUDY, sets)
    assert study.slo is not None and study.slo.default is not None
    bench = Bench(venv, model, PROMPT_TOKENS, ANSWER_TOKENS, study.slo.default.limits_ms())
    if "auto_tune" not in results:
        peer = auto_tune(bench, study.engine, (args.inf_prompts, args.step_prompts), say)
        keep("auto_tune", peer.as_dict())
    peer = AutoTune.from_dict(results["auto_tune"])
    if "kneepoint" not in results:
        runs = args.work / "runs"
        shutil.rmtree(runs, ignore_errors=True)
        keep("kneepoint", run_kneepoint(sets, peer.device_s, runs))
    winner = EngineConfig.model_validate(results["kneepoint"]["winner"])
    contenders = {"start": study.engine, "kneepoint": winner}
    for mode in MODES:
        contenders[mode] = study.engine.replace(performance_mode=mode)
    best = peer.best()
    if best is not None and peer.kv_bytes is not None:
        contenders["auto_tune"] = cell_config(
            study.engine, peer.kv_bytes, best.max_num_seqs, best.max_num_batched_tokens
        )
    rates = [round(share * speed.capacity_rps(), 2) for share in LADDER]
    judged: dict[str, Any] = results.get("judge", {})
    for name, config in contenders.items():
        if name not in judged:
            judged[name] = judge(bench, config, rates, args.judge_runs)
            keep("judge", judged)
        say(f"judge: {name}: {judged[name]['capacity_rps']} req/s")
    report(judged, peer.device_s, results["kneepoint"])


def _host(kept: dict[str, Any]) -> HostSpeed:
    """A kept host reading (JSON keys are strings; the concurrencies are ints)."""
    by_int = {key: {int(c): v for c, v in kept[key].items()}
              for key in ("requests_per_s", "ttft_p50_ms")}  # fmt: skip
    return HostSpeed(**{**kept, **by_int})


def report(judged: dict[str, Any], peer_s: float, kneepoint: dict[str, Any]) -> None:
    kneepoint_s = float(kneepoint["device_s"])
    print(f"\n{'':10} {'SLO capacity (vllm bench)':>26} {'device s':>9}")
    rows = [("start", None), *((m, None) for m in MODES), ("auto_tune", peer_s)]
    for name, device_s in [*rows, ("kneepoint", kneepoint_s)]:
        capacity = judged.get(name, {}).get("capacity_rps")
        cell = f"{capacity:.2f} req/s" if capacity else "none"
        print(f"{name:13} {cell:>23} {'' if device_s is None else f'{device_s:9.0f}'}")
    to_winner_s = kneepoint.get("to_winner_s")
    if to_winner_s is not None:
        print(f"kneepoint had its winner after {to_winner_s:.0f} s; it stopped: "
              f"{kneepoint.get('finished')}")  # fmt: skip
    kp = judged["kneepoint"].get("capacity_rps")
    at = judged.get("auto_tune", {}).get("capacity_rps")
    if kp and at:
        found = f", to its winner {to_winner_s / peer_s:.2f}x" if to_winner_s is not None else ""
        print(f"kneepoint/auto_tune capacity {kp / at:.2f}x (goal >= 1), device time "
              f"{kneepoint_s / peer_s:.2f}x{found} (goal <= 0.5)")  # fmt: skip
    modes = [judged.get(m, {}).get("capacity_rps") for m in MODES]
    best = max((m for m in modes if m), default=None)
    if kp and best:
        print(f"kneepoint/best --performance-mode capacity {kp / best:.2f}x (goal >= 1)")


if __name__ == "__main__":
    main()
