"""Every objective a study can name, end to end on the simulator: SLO capacity (the other test
files), goodput at a fixed offered rate with its per-class attainment, and peak throughput;
and how each is read off a sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.load.objective import rules
from kneepoint.load.point import token_rates
from kneepoint.records.engine import EngineConfig
from kneepoint.records.ledger import Finished
from kneepoint.records.measure import RequestRecord
from kneepoint.records.objective import GoodputAtRate, PeakThroughput, SloCapacity
from kneepoint.records.sweep import SweepPoint, SweepResult
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from tests.support.readings import point

from .conftest import SMALL

SETTINGS = ["--set", "budget.max_trials=2"]
SMALL_CONFIG = EngineConfig(model="meta-llama/Llama-3.1-8B-Instruct")


def tune(tmp_path: Path, objective: str) -> tuple[RunState, str]:
    args = ["tune", str(SMALL), "--runs-dir", str(tmp_path), "--set", f"objective={objective}"]
    assert main([*args, *SETTINGS]) == 0
    (folder,) = tmp_path.iterdir()
    study_objective = GoodputAtRate(rate_rps=6.0) if "goodput" in objective else PeakThroughput()
    state = RunState.replay(Ledger(folder / "ledger.jsonl").read(), study_objective)
    return state, (folder / "report.md").read_text()


def test_goodput_at_a_fixed_rate_is_tuned_and_reported_per_class(tmp_path: Path) -> None:
    state, report = tune(tmp_path, "{kind: goodput_at_rate, rate_rps: 6}")
    assert isinstance(state.finished, Finished) and state.baseline is not None
    start = rules(GoodputAtRate(rate_rps=6.0)).value(state.baseline.repeats)
    assert start is not None and start < 3.0  # a 2-sequence cap serves ~0.6 of the 6 req/s
    assert state.incumbent_objective is not None and state.incumbent_objective > 2 * start
    assert {p.rate_rps for p in state.baseline.repeats.points} == {6.0}  # only the rate
    assert "- Started at goodput at 6 req/s" in report
    attainment = report.split("## Attainment per class at 6 req/s")[1].split("##")[0]
    assert "| start | short |" in attainment and "| winner | short |" in attainment


def test_a_rate_far_past_the_capacity_is_named_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["tune", str(SMALL), "--runs-dir", str(tmp_path),
            "--set", "objective={kind: goodput_at_rate, rate_rps: 400}"]  # fmt: skip
    assert main([*args, *SETTINGS]) == 1
    (folder,) = tmp_path.iterdir()
    state = RunState.replay(Ledger(folder / "ledger.jsonl").read(), GoodputAtRate(rate_rps=400))
    assert state.finished is not None and not state.trials
    assert "the objective's rate, 400 req/s, is" in state.finished.detail
    assert "Set objective.rate_rps near what the server holds" in state.finished.detail
    assert "400 req/s, is" in capsys.readouterr().err


def test_peak_throughput_is_tuned_on_tokens_past_the_knee(tmp_path: Path) -> None:
    state, report = tune(tmp_path, "{kind: peak_throughput}")
    assert state.baseline is not None
    start = rules(PeakThroughput()).value(state.baseline.repeats)
    assert start is not None and state.incumbent_objective is not None
    assert state.incumbent_objective > 2 * start  # more sequences per step, more tokens
    knee = state.baseline.knee.capacity_rps or 0.0
    assert min(p.rate_rps for p in state.baseline.repeats.points) >= 1.9 * knee
    assert "peak output throughput" in report and "output tok/s" in report


def record(index: int, scheduled: float, chunks: tuple[float, ...], tokens: int) -> RequestRecord:
    return RequestRecord(index=index, traffic_class="short", scheduled_s=scheduled,
                         sent_s=scheduled, chunk_times_s=chunks, end_s=chunks[-1],
                         prompt_tokens=10, output_tokens=tokens)  # fmt: skip


def test_tokens_per_second_count_what_the_server_delivered_not_what_was_offered() -> None:
    # Ten requests offered within a second, served one token every 0.1 s, one at a time: the
    # server delivered 10 tok/s however fast they were offered.
    records, t = [], 0.0
    for i in range(10):
        chunks = tuple(t + 0.1 * (k + 1) for k in range(10))
        records.append(record(i, 0.1 * i, chunks, 10))
        t = chunks[-1]
    output, prompt = token_rates(records, trim=0.1)
    assert output == pytest.approx(10.0, rel=0.05)
    assert prompt == pytest.approx(10.0, rel=0.15)  # one 10-token prompt a second


def test_each_objective_reads_its_own_value_per_repeat() -> None:
    def at(rate: float, repeat: int, goodput: float, tokens: float) -> SweepPoint:
        loaded = point({"steps_per_s": 10.0}, violations=())
        loaded = loaded.model_copy(update={"rate_rps": rate, "goodput_rps": goodput,
                                           "output_tokens_per_s": tokens})  # fmt: skip
        return SweepPoint(rate_rps=rate, repeat=repeat, arm="a", margin=0.5, point=loaded)

    points = (at(5.0, 0, 5.0, 400.0), at(6.0, 0, 5.5, 500.0), at(6.1, 1, 5.9, 450.0))
    result = SweepResult(kind="validate", config=SMALL_CONFIG, points=points, capacity_rps=7.0,
                         capacity_by_repeat=(7.0, 7.0))  # fmt: skip
    assert rules(GoodputAtRate(rate_rps=6.0)).by_repeat(result) == (5.5, 5.9)
    assert rules(PeakThroughput()).by_repeat(result) == (500.0, 450.0)
    assert rules(SloCapacity()).value(result) == 7.0
    assert rules(PeakThroughput(tokens="total")).value(result) is None  # no prompt rate recorded
