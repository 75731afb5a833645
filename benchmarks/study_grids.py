"""The studies regret.py scores and the grid over each one's searched knobs: per knob, the values
a grid takes, and which knobs each study's grid spans.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from kneepoint.config import load_study
from kneepoint.records.engine import EngineConfig
from kneepoint.records.study import StudySpec

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "configs" / "studies" / "quickstart.yaml"
SCENARIOS = REPO / "configs" / "scenarios"
GIB = 2**30
# Per knob, the values a grid takes: around the shipped starting points (the quickstart's 256
# sequences and 2,048 tokens; the grid, whose quickstart optimum is 512 / 1,024 / fp8
# / kv fp8 at 53.02 req/s).
VALUES: dict[str, list[object]] = {
    "max_num_seqs": [128, 256, 512, 1024],
    "max_num_batched_tokens": [512, 1024, 2048, 4096],
    "kv_cache_dtype": ["auto", "fp8"],
    "quantization": [None, "fp8"],
    "async_scheduling": [False, True],
    "enable_prefix_caching": [False, True],
    "gpu_memory_utilization": [0.8, 0.9, 0.95],
    "kv_cache_memory_bytes": [GIB, 2 * GIB, 4 * GIB, 8 * GIB],
    "api_server_count": [None, 2, 4],
    "kv_offloading_size": [None, 16, 64, 256],
    # off and the catalogue's n-gram drafts (configs/knobs.yaml)
    "speculative_config": [
        None,
        *(
            {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4}
            for k in (2, 3, 5)
        ),
    ],
}
# The knobs each study's grid spans (its search.knobs, less those left at the start for time:
# each added two-valued knob doubles the grid).
QUICKSTART_GRID = ["max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "quantization"]
STUDIES: dict[str, tuple[Path, list[str], list[str]]] = {
    "quickstart": (QUICKSTART, [], QUICKSTART_GRID),
    "rag": (QUICKSTART, ["workload=rag"], QUICKSTART_GRID),
    "multiturn-chat": (QUICKSTART, ["workload=multiturn-chat"],
                       [*QUICKSTART_GRID, "enable_prefix_caching"]),
    "agentic": (QUICKSTART, ["workload=agentic"], [*QUICKSTART_GRID, "enable_prefix_caching"]),
    **{path.stem: (path, [], []) for path in sorted(SCENARIOS.glob("*.yaml"))},
    # Its goodput at 32 req/s is 49x past every configuration's SLO capacity (the tune says
    # so and stops before its search): the same server and knobs, tuned for capacity (its
    # grid without utilisation, 2 x 2 x 4 x 4 x 2 configurations: the tune's winner held
    # fp8 KV, which the study's last knobs dropped from the grid, and beat it by 87%).
    "qwen14b-ada-mix-capacity": (SCENARIOS / "qwen14b-ada-mix.yaml",
                                 ["objective={kind: slo_capacity}"],
                                 ["enable_prefix_caching", "quantization", "max_num_seqs",
                                  "max_num_batched_tokens", "kv_cache_dtype"]),
}  # fmt: skip
MAX_CELLS = 160


def study_of(name: str, seed_offset: int = 0) -> StudySpec:
    """The study by its regret name, its workload seed moved on by ``seed_offset``."""
    path, sets, _ = STUDIES[name]
    study = load_study(path, sets)
    if not seed_offset:
        return study
    return load_study(path, [*sets, f"workload.seed={study.workload.seed + seed_offset}"])


def grid(name: str) -> list[EngineConfig]:
    """The study's grid: each spanned knob over its values (the start's value added)."""
    study = study_of(name)
    spans = STUDIES[name][2] or [k for k in study.search.knobs if k in VALUES]
    axes: dict[str, list[object]] = {}
    for knob in spans:
        if knob == "gpu_memory_utilization" and study.engine.kv_cache_memory_bytes:
            continue  # the pool is sized in bytes; vLLM ignores the fraction then
        values = list(VALUES[knob])
        start = getattr(study.engine, knob)
        if start is not None and start not in values:
            values.append(start)
        axes[knob] = values
    while len(axes) > 1 and math.prod(len(v) for v in axes.values()) > MAX_CELLS:
        axes.popitem()  # the study's last knobs stay at the start
    configs: dict[str, EngineConfig] = {}
    for cell in itertools.product(*axes.values()):
        try:  # a combination vLLM rejects (more sequences than step tokens) is no cell
            config = study.engine.replace(**dict(zip(axes, cell, strict=True)))
        except ValueError:
            continue
        configs[config.fingerprint()] = config
    return list(configs.values())
