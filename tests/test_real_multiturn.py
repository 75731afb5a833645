"""Conversations on a real engine: `kneepoint tune` of the multi-turn study on vLLM's CPU
build (tests/fixtures/studies/cpu-tiny-multiturn.yaml: prefix caching off, one rate), on the
2-core machine that also runs the load generator. Each session's turns go over HTTP one after
another; the tune must propose prefix caching from the workload's computable reuse, measure
it, promote it, and report the server's own hit rate beside the prediction. Its TTFT limit is
sized from the host's measured prefill speed (tests/support/real_vllm/host_speed.py: at least three
times its longest prompt's prefill alone), and its one rate from its capacity with caching,
measured first with `kneepoint sweep` (with its capacity without caching). The real_vllm tier
(installs vLLM's CPU build)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kneepoint.records.workload import Workload, max_length_tokens, mean_length_tokens
from tests.conftest import REPO, TuneRun, real_capacity_rps
from tests.conftest import real_tune as run_tune
from tests.support.real_vllm.host_speed import REAL_TUNE_CI, HostSpeed, prompt_ttft_limit_ms

pytestmark = pytest.mark.real_vllm
STUDY = REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-multiturn.yaml"
RATE_OF_CACHED_CAPACITY = 0.8
"""The tune's one rate, as a share of the SLO capacity `kneepoint sweep` measures with caching
on: inside it, and past the capacity without caching. A fixed multiple of the uncached
capacity fits no host: at 2.2x on an AVX-512 AMD host (105 req/s against 50.5 uncached)
caching's 10 s screen met the rate and its 20 s validation points served 43% and 51% of it,
and at 1.8x on an AVX2 host the uncached server met the SLO in one 20 s point of five and the
judge rightly kept it (+300% [-18%, +618%]). How much caching serves depends on how much of a
request the host spends outside prefill (HTTP, tokenising, the load generator on the same two
cores), and on the point's length: sweeps, screens and validations here all run the study's
10 s points, since in 20 s points a conversation's later turns (longer histories, more
sessions sharing the pool) cut caching's capacity from 140 to 76 req/s on the AMD host
against 54-57 uncached in 10 s points (2026-11-28; issue "Step 16" note)."""
LEAST_CACHED_OVER_UNCACHED = 1.5
"""Caching must serve at least this much more than no caching at its measured knee for the
test to mean anything (2.47x on an AVX-512 Intel host, benchmarks/README)."""


def _prompt_tokens() -> tuple[float, int]:
    """A request's prompt, on average (776 tokens: the system prompt, its message and the
    history it carries) and at the longest (1,952: the sixth turn's)."""
    workload = Workload.model_validate(yaml.safe_load(STUDY.read_text())["workload"])
    (chat,) = workload.classes
    (system,) = workload.prefix_groups
    assert chat.session is not None
    mean = system.prefix_tokens + mean_length_tokens(chat.input_tokens) + chat.mean_history_tokens()
    turns = getattr(chat.session.turns, "max_turns", None) or 1
    longest = max_length_tokens(chat.input_tokens) + max_length_tokens(chat.output_tokens)
    return mean, system.prefix_tokens + turns * longest


@pytest.fixture(scope="module")
def multiturn_tune(
    vllm_python: Path, tiny_model: Path, host_speed: HostSpeed,
    tmp_path_factory: pytest.TempPathFactory,
) -> TuneRun:  # fmt: skip
    mean, longest = _prompt_tokens()
    sized = [
        f"slo.default.ttft_p99_ms={prompt_ttft_limit_ms(host_speed, longest)}",
        "measurement.knee_tolerance=0.1",  # a knee within 10%: fewer points on a slow host
        f"tuning.start_rps={host_speed.prefill_tokens_per_s / mean / 2:.3g}",
        *REAL_TUNE_CI,
    ]
    sweeps = tmp_path_factory.mktemp("real-multiturn-sweep")
    capacity = real_capacity_rps(STUDY, sweeps / "off.json", vllm_python, tiny_model, sized)
    cached_sized = [*sized, "engine.enable_prefix_caching=true", f"tuning.start_rps={capacity:.3g}"]
    cached = real_capacity_rps(STUDY, sweeps / "on.json", vllm_python, tiny_model, cached_sized)
    assert cached >= LEAST_CACHED_OVER_UNCACHED * capacity, (cached, capacity)
    rate = float(f"{RATE_OF_CACHED_CAPACITY * cached:.3g}")
    runs = tmp_path_factory.mktemp("real-multiturn")
    sized += [f"objective.rate_rps={rate}", f"tuning.start_rps={capacity / 2:.3g}"]
    return run_tune(STUDY, runs, vllm_python, tiny_model, sized, timeout_s=1800)


def test_the_tune_turns_prefix_caching_on_and_it_pays(multiturn_tune: TuneRun) -> None:
    lines = (multiturn_tune.folder / "ledger.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    proposed = [e for e in events if e["event"] == "proposed"]
    assert proposed, multiturn_tune.stderr[-3000:]
    assert proposed[0]["proposal"]["changes"] == {"enable_prefix_caching": True}
    promoted = [e for e in events if e["event"] == "promoted"]
    assert promoted, multiturn_tune.stderr[-3000:]
    assert promoted[-1]["config"]["enable_prefix_caching"] is True


def test_the_report_puts_the_measured_hit_rate_beside_the_prediction(
    multiturn_tune: TuneRun,
) -> None:
    report = (multiturn_tune.folder / "report.md").read_text()
    assert "## Traffic reuse and the prefix cache" in report
    pattern = r"would serve (\d+)% of prompt tokens.*hit rate at [\d.]+ req/s: (\d+)%"
    found = re.search(pattern, report)
    assert found, report
    predicted, measured = map(int, found.groups())
    # benchmarks/multiturn_fidelity.py: the real server hits what the workload computes
    assert measured > 0 and abs(predicted - measured) <= 10, (predicted, measured)
