"""Conversations on a real engine: `kneepoint tune` of the multi-turn study on vLLM's CPU
build (tests/fixtures/studies/cpu-tiny-multiturn.yaml: prefix caching off, one rate), on the
2-core machine that also runs the load generator. Each session's turns go over HTTP one after
another; the tune must propose prefix caching from the workload's computable reuse, measure
it, promote it, and report the server's own hit rate beside the prediction. The real_vllm
tier (installs vLLM's CPU build)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, TuneRun
from tests.conftest import real_tune as run_tune

pytestmark = pytest.mark.real_vllm
STUDY = REPO / "tests" / "fixtures" / "studies" / "cpu-tiny-multiturn.yaml"


@pytest.fixture(scope="module")
def multiturn_tune(
    vllm_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> TuneRun:
    runs = tmp_path_factory.mktemp("real-multiturn")
    return run_tune(STUDY, runs, vllm_python, tiny_model, timeout_s=1800)


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
