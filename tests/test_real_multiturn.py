"""Conversations on a real engine: `kneepoint tune` of the multi-turn study on vLLM's CPU
build (tests/fixtures/studies/cpu-tiny-multiturn.yaml: prefix caching off, one rate), on the
2-core machine that also runs the load generator. Each session's turns go over HTTP one after
another; the tune must propose prefix caching from the workload's computable reuse, measure
it, promote it, and report the server's own hit rate beside the prediction. Its TTFT limit is
sized from the host's measured prefill speed (tests/support/real_vllm/host_speed.py: at least three
times its longest prompt's prefill alone), and its one rate between its capacities without
and with caching, each measured first with `kneepoint sweep`. The real_vllm tier (installs
vLLM's CPU build)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from kneepoint.records.lengths import max_length_tokens, mean_length_tokens
from kneepoint.records.workload import Workload
from tests.conftest import REPO, TuneRun, real_capacity_rps
from tests.conftest import real_tune as run_tune
from tests.support.real_vllm.host_speed import REAL_TUNE_CI, HostSpeed, prompt_ttft_limit_ms

pytestmark = pytest.mark.real_vllm
STUDY = REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-multiturn.yaml"


def tune_rate_rps(uncached_rps: float, cached_rps: float) -> float:
    """The tune's one rate: the geometric mean of the SLO capacities `kneepoint sweep`
    measures without and with caching, the same ratio past the one as inside the other (1.64x
    the uncached and 0.61x the cached on the AVX-512 AMD host's 52.0 and 140.5 req/s). Rates
    nearer either capacity were each a coin toss there, as caching's capacity is no fixed
    figure on a pool this small: it depends on how long the later turns' histories have
    shared the pool. At 0.8x the cached (112 req/s) the screen met the rate and four 10 s
    validation points served 2-73% of it (CI, 2026-12-02: the judge rightly kept the incumbent,
    +44.75 good req/s over 4 paired repeats with an interval reaching below zero); at 2.2x the
    uncached (105) validation served 43-51%; at 1.8x the uncached on an AVX2 host the uncached
    server met the SLO in one 20 s point of five (+300% [-18%, +618%], kept); and 20 s points
    cut caching's capacity from 140 to 76 req/s against 54-57 uncached in 10 s points
    (2026-11-28; issue "Step 16" note), so the sweeps run the study's 10 s points and the
    tune's stretch them only where 10 s hold too few requests (``tune_seconds``)."""
    return float(f"{math.sqrt(uncached_rps * cached_rps):.3g}")


TUNE_POINT_REQUESTS = 150
"""The tune's points send at least this many requests (at its one rate), about a third of
which land in the stable window once the sessions' ramp and the drain are trimmed. In 10 s
points at 6.98 req/s on an AVX2-only host the window held 7-14 requests, a p99 their maximum:
the uncached baseline's two repeats read 0.00 and 5.98 good req/s, and with that noise no
trial could show a gain, so the tune ended `exhausted` untried (CI, 2026-12-02). On the
AVX-512 hosts the rate is ~80 req/s and the points stay 10 s."""


def tune_seconds(rate_rps: float) -> int:
    """Seconds of arrivals per tune point at ``rate_rps``: the study's 10, or enough for
    ``TUNE_POINT_REQUESTS``."""
    return max(10, math.ceil(TUNE_POINT_REQUESTS / rate_rps))


LEAST_CACHED_OVER_UNCACHED = 1.5
"""Caching must serve at least this much more than no caching at its measured knee for the
test to mean anything, a rate 1.22x past the one and inside the other (2.47x on an AVX-512
Intel host, benchmarks/README; 2.70x on the AVX-512 AMD host)."""


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
    rate = tune_rate_rps(capacity, cached)
    runs = tmp_path_factory.mktemp("real-multiturn")
    seconds = tune_seconds(rate)
    sized += [
        f"objective.rate_rps={rate}",
        f"tuning.start_rps={capacity / 2:.3g}",
        f"tuning.screen_seconds={seconds}",
        f"tuning.validate_seconds={seconds}",
    ]
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
