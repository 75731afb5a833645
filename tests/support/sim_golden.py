"""Seeded simulator runs whose numbers must not move when the simulator is made faster.

``figures()`` runs a handful of load points that between them exercise every path of the
engine: the decode cohort and eager stepping, prefix caching, sliding windows, preemption and
a quantised model. ``tests/fixtures/sim_golden.json`` holds what they gave when written;
``test_sim_golden.py`` compares. A change that is meant to move the physics rewrites the file
(``python -m tests.support.sim_golden --write``) and says why in its commit message.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kneepoint.config.study import load_study
from kneepoint.sim.engine import SimEngine
from kneepoint.sim.loadpoint import simulate_load_point

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "sim_golden.json"

_PREFIX = ("engine.enable_prefix_caching=true",)
# (name, study file, overrides, offered req/s, requests, eager): the quickstart at its knee
# (38.8 req/s, benchmarks/sim_speed.py) and twice it, and each shipped scenario near its knee.
CASES = (
    ("quickstart-knee", "configs/studies/quickstart.yaml", (), 38.8, 600, False),
    ("quickstart-2x-knee", "configs/studies/quickstart.yaml", (), 77.6, 600, False),
    ("quickstart-knee-eager", "configs/studies/quickstart.yaml", (), 38.8, 300, True),
    ("cache-bound", "configs/scenarios/cache-bound.yaml", (), 10.0, 300, False),
    ("scheduling-bound", "configs/scenarios/scheduling-bound.yaml", (), 100.0, 600, False),
    ("gemma12b-sliding", "configs/scenarios/gemma12b-h100-random.yaml", (), 9.0, 200, False),
    ("qwen14b-mix", "configs/scenarios/qwen14b-ada-mix.yaml", (), 32.0, 300, False),
    ("qwen14b-mix-prefix", "configs/scenarios/qwen14b-ada-mix.yaml", _PREFIX, 32.0, 300, False),
)


def _case(
    path: str, overrides: tuple[str, ...], rate: float, requests: int, eager: bool
) -> dict[str, Any]:
    study = load_study(ROOT / path, overrides)
    engine = SimEngine(study.gpu, study.model, study.engine, study.efficiency, eager=eager)
    point = simulate_load_point(study, rate, requests, on=engine)
    steps = point.load.run.steps
    records = point.load.records
    dists = point.score.dists
    return {
        "steps": len(steps),
        "clock_s": engine.now_s,
        "preemptions": point.preemptions,
        "sampled_tokens": sum(s.num_samples for s in steps),
        "scheduled_tokens": sum(s.num_tokens for s in steps),
        "prefix_hit_tokens": engine.kv.hit_tokens,
        "finished": sum(1 for r in records if r.error is None),
        "output_tokens": sum(r.output_tokens or 0 for r in records),
        "chunk_time_sum_s": sum(sum(r.chunk_times_s) for r in records),
        "end_time_sum_s": sum(r.end_s or 0.0 for r in records),
        "good": point.score.good,
        "meets_slo": point.score.meets_slo,
        "percentiles_ms": {
            f"{cls}.{metric}": [d.count, d.mean_ms, d.p50_ms, d.p99_ms]
            for cls, metrics in sorted(dists.items())
            for metric, d in sorted(metrics.items())
        },
        "kv_usage_sum": sum(s.kv_usage for s in steps),
        "load_point": point.point.model_dump(mode="python"),
    }


def figures() -> dict[str, dict[str, Any]]:
    return {name: _case(*args) for name, *args in CASES}  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the fixture")
    args = parser.parse_args()
    result = figures()
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.write:
        FIXTURE.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
