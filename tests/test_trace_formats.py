"""Public trace layouts (Mooncake JSONL, the Azure LLM inference CSV, BurstGPT's CSV) read into
requests the load generator and the simulator replay, bad rows named by line and column."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kneepoint.config.errors import ConfigError
from kneepoint.config.trace import read_trace
from kneepoint.load.burst import burst_plan
from kneepoint.load.plan import plan_requests
from kneepoint.records.workload import TraceFormat, Workload

from .conftest import KNEEPOINT, REPO, SMALL, kneepoint_main

TRACES = REPO / "tests" / "fixtures" / "traces"
FILES: dict[TraceFormat, Path] = {
    "mooncake": TRACES / "mooncake.jsonl",
    "azure": TRACES / "azure.csv",
    "burstgpt": TRACES / "burstgpt.csv",
}


def _workload(layout: TraceFormat) -> Workload:
    return Workload.model_validate(
        {
            "name": "replayed",
            "classes": [
                {
                    "name": "all",
                    "input_tokens": {"kind": "fixed", "tokens": 64},
                    "output_tokens": {"kind": "fixed", "tokens": 16},
                }
            ],
            "arrival": {"kind": "trace", "path": FILES[layout], "format": layout},
        }
    )


def test_each_layout_reads_its_units_from_the_first_request() -> None:
    mooncake = read_trace(FILES["mooncake"], layout="mooncake")
    assert len(mooncake) == 24 and mooncake[0].timestamp_s == 0.0
    assert mooncake[1].timestamp_s == pytest.approx(0.454)  # ms
    assert mooncake[0].blocks == (1, 2, 1000, 1001) and mooncake[0].block_tokens == 512
    assert (mooncake[0].input_tokens, mooncake[0].output_tokens) == (1721, 97)
    azure = read_trace(FILES["azure"], layout="azure")
    assert len(azure) == 24 and azure[0].timestamp_s == 0.0
    assert azure[1].timestamp_s == pytest.approx(47.1935762 - 46.3106618, abs=1e-5)
    assert (azure[0].input_tokens, azure[0].output_tokens) == (1099, 46)
    burst = read_trace(FILES["burstgpt"], layout="burstgpt")
    assert len(burst) == 23, "the failed request (0 response tokens) is left out"
    assert burst[0].timestamp_s == 0.0 and (burst[0].input_tokens, burst[0].output_tokens) == (
        522,
        87,
    )


def test_mooncake_requests_share_the_tokens_of_their_shared_leading_blocks() -> None:
    trace = read_trace(FILES["mooncake"], layout="mooncake")
    plan = plan_requests(_workload("mooncake"), 4.0, num_requests=24, trace=trace)
    assert [len(r.prompt) for r in plan] == [e.input_tokens for e in trace]
    first, fourth = plan[0], plan[3]  # one conversation: the fourth turn repeats the first's blocks
    assert trace[3].blocks[:4] == trace[0].blocks
    assert len(first.prompt) < 4 * 512 and fourth.prompt[: len(first.prompt)] == first.prompt
    assert first.prompt[:512] != plan[1].prompt[:512], "other conversations share nothing"
    span = trace[-1].timestamp_s
    assert plan[-1].at_s == pytest.approx(23 / 4.0, rel=1e-6) and span > 0


@pytest.mark.parametrize(
    ("layout", "text", "said"),
    [
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1]}\n'
         '{"timestamp": 9, "input_length": 5, "output_length": 3, "hash_ids": "x"}\n',
         ":2: hash_ids: not a list of block ids"),
        ("mooncake", '{"timestamp": 0, "input_length": 0, "output_length": 3}\n',
         ":1: input_tokens: input should be greater than or equal to 1"),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.3,10,5\n"
         "yesterday,10,5\n", ":3: TIMESTAMP: not a date and time: 'yesterday'"),
        ("azure", "TIMESTAMP,Context,GeneratedTokens\n", ":1: no column 'ContextTokens'"),
        ("burstgpt", "Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,12.5,3\n",
         ":2: Request tokens: not a whole number of tokens: 12.5"),
        ("burstgpt", "Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,12,0\n",
         "the trace has no entries"),
    ],
)  # fmt: skip
def test_a_bad_row_is_named_by_line_and_column(
    layout: TraceFormat, text: str, said: str, tmp_path: Path
) -> None:
    path = tmp_path / "trace"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_trace(path, layout=layout)
    [line] = info.value.lines()
    assert line.startswith(str(path)) and said in line, line


def test_a_study_with_a_bad_row_is_refused_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "azure.csv"
    bad.write_text(FILES["azure"].read_text().replace(",46\n", ",-46\n", 1))
    arrival = f"workload.arrival={{kind: trace, format: azure, path: {bad}}}"
    done = kneepoint_main("tune", SMALL, "--runs-dir", tmp_path / "runs", "--set", arrival)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{bad}:2: output_tokens: input should be greater than or equal to 1" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_burst_replays_the_trace_at_each_stretch_s_rate() -> None:
    trace = read_trace(FILES["burstgpt"], layout="burstgpt")
    workload = _workload("burstgpt")
    plan = burst_plan(workload, 2.0, 2.5, settle_s=10.0, burst_s=4.0, after_s=10.0,
                      vocab_size=32000, seed=1, trace=trace)  # fmt: skip
    assert len(plan.requests) == 20 + 20 + 20
    lengths = {e.input_tokens for e in trace}
    assert {len(r.prompt) for r in plan.requests} <= lengths
    assert plan.burst_start_s == 10.0 and plan.burst_end_s == 14.0


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(FILES))
def test_each_layout_tunes_on_the_simulator(layout: TraceFormat, tmp_path: Path) -> None:
    arrival = f"workload.arrival={{kind: trace, format: {layout}, path: {FILES[layout]}}}"
    done = subprocess.run(
        [KNEEPOINT, "tune", str(SMALL), "--runs-dir", str(tmp_path), "--set", arrival,
         "--set", "engine.max_model_len=8192", "--set", "budget.max_trials=2",
         "--set", "slo={default: {ttft_p99_ms: 20000, itl_p95_ms: 200}}"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [run] = tmp_path.iterdir()
    assert (run / "report.md").is_file() and (run / "best-command.txt").is_file()
    # max_num_seqs 2 binds the baseline and raising it pays (a short trace that
    # ended a point early once read as an idle server at thousands of req/s)
    assert "baseline: scheduling (admission cap)-bound" in done.stderr
    assert "promoted trial 1" in done.stderr and "underloaded" not in done.stderr
