"""A fresh server's warm-up: the workload's corpus once, least popular first, then a burst of
its requests; the simulator's opening warmed by the same plan a launched server is sent."""

from __future__ import annotations

from pathlib import Path

from kneepoint.config import load_study
from kneepoint.load.plan import plan_requests, point_seed
from kneepoint.load.size import PointSize
from kneepoint.load.warmup import WARMUP_REQUESTS, warmup_plan
from kneepoint.physics.defaults import resolve_engine
from kneepoint.physics.startup import startup_seconds
from kneepoint.probes.backends import open_target
from kneepoint.records.workload import Workload
from kneepoint.sim.loadpoint import simulate_load_point
from tests.conftest import CONFIGS
from tests.support.pruned import CHAT

LIBRARY = Workload.model_validate({
    "name": "library", "seed": 3,
    "prefix_groups": [{"name": "docs", "documents": 12, "prefix_tokens": 256,
                       "popularity": "zipf"}],
    "classes": [{"name": "ask", "prefix_group": "docs",
                 "input_tokens": {"kind": "fixed", "tokens": 32},
                 "output_tokens": {"kind": "fixed", "tokens": 8}}],
})  # fmt: skip


def test_every_document_goes_once_the_most_popular_last_then_the_burst() -> None:
    plan = warmup_plan(LIBRARY, 32_000)
    docs, burst = plan[:12], plan[12:]
    assert [p.prefix_id for p in docs] == [f"docs/{d}" for d in range(11, -1, -1)]
    assert all(p.max_tokens == 1 and len(p.prompt) == 257 for p in docs)
    assert len(burst) == WARMUP_REQUESTS and all(p.max_tokens == 8 for p in burst)
    assert [p.index for p in plan] == list(range(len(plan)))
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)


def test_every_repeat_asks_its_own_questions_of_the_same_corpus() -> None:
    """The documents a point draws are the warm-up's, whatever its repeat; its own prompt
    tokens are its own."""
    warmed = {p.prefix_id: p.prompt[:256] for p in warmup_plan(LIBRARY, 32_000)[:12]}
    repeats = [
        plan_requests(LIBRARY, 2.0, num_requests=20, seed=point_seed(LIBRARY.seed, r))
        for r in (0, 1)
    ]
    for plan in repeats:
        assert all(p.prompt[:256] == warmed[p.prefix_id] for p in plan)
    assert repeats[0][0].prompt[256:] != repeats[1][0].prompt[256:]


def test_a_workload_without_a_corpus_gets_the_burst_alone() -> None:
    plan = warmup_plan(CHAT, 32_000)
    assert len(plan) == WARMUP_REQUESTS and all(p.prefix_id is None for p in plan)


def test_a_fresh_simulated_server_finds_the_corpus_warm_at_its_first_point(
    tmp_path: Path,
) -> None:
    """document-qa: forty 6,144-token documents, ten of which the pool keeps. Warmed, the
    first point's prompts find cached documents from its first request on, as a point late
    in a knee search's ramp does, where a cold engine finds only what the point itself
    stored; the warm-up runs on the device clock."""
    study = load_study(CONFIGS / "scenarios" / "document-qa.yaml")
    size = PointSize(20.0)
    cold = simulate_load_point(study, 1.0, size.requests(1.0)).point.signals.prefix_hit_rate
    with open_target(study, study.engine, tmp_path, size) as target:
        started = target.clock.virtual_s or 0.0
        warm = target.probe(1.0, 0).signals.prefix_hit_rate
    assert cold is not None and warm is not None and warm > cold
    engine = resolve_engine(study.engine, study.gpu, study.model)
    assert started > startup_seconds(study.model, engine)
