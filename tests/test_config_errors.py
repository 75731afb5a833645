"""Bad study files: exit 2 with one line per problem naming file, line, field and problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kneepoint.cli.main import main
from kneepoint.config import ConfigError, load_study

from .conftest import QUICKSTART


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = QUICKSTART.read_text()
    assert old in text, old
    path = tmp_path / "study.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def _line_of(path: Path, needle: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _errors(path: Path, capsys: pytest.CaptureFixture[str], *overrides: str) -> list[str]:
    args = ["config", "check", str(path)]
    for override in overrides:
        args += ["--set", override]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing half-written to stdout
    return captured.err.splitlines()


def test_typo_key_names_field_and_suggests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _variant(tmp_path, "max_num_seqs: 256", "max_num_seq: 256")
    line = _line_of(path, "max_num_seq:")
    assert _errors(path, capsys) == [
        f"kneepoint: {path}:{line}: engine.max_num_seq: unknown key 'max_num_seq' "
        "(did you mean 'max_num_seqs'?)"
    ]


def test_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "max_num_seqs: 256", "max_num_seqs: lots")
    [error] = _errors(path, capsys)
    assert error.startswith(f"kneepoint: {path}:{_line_of(path, 'lots')}: engine.max_num_seqs: ")
    assert "integer" in error and "(got 'lots')" in error


def test_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "gpu_memory_utilization: 0.9", "gpu_memory_utilization: 1.3")
    line = _line_of(path, "1.3")
    assert _errors(path, capsys) == [
        f"kneepoint: {path}:{line}: engine.gpu_memory_utilization: "
        "must be less than or equal to 1 (got 1.3)"
    ]


def test_broken_yaml_syntax(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "  clock: virtual", "  clock: [virtual")
    [error] = _errors(path, capsys)
    assert error.startswith(f"kneepoint: {path}:")
    assert ": backend.clock: YAML syntax error" in error
    assert "flow sequence that starts on line" in error


def test_syntax_error_inside_a_list_item_names_the_item(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(
        "workload:\n  classes:\n    - name: a\n    - name: b\n"
        "      input_tokens: {kind: fixed tokens: 3}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_study(path)
    [problem] = info.value.problems
    assert (problem.line, problem.loc) == (5, ("workload", "classes", 1, "input_tokens"))


def test_duplicate_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "  max_num_seqs: 256", "  max_num_seqs: 256\n  max_num_seqs: 64")
    line = _line_of(path, "max_num_seqs: 64")
    assert _errors(path, capsys) == [
        f"kneepoint: {path}:{line}: key 'max_num_seqs' appears more than once"
    ]


def test_unknown_key_in_a_tagged_union_lists_that_member_s_fields(tmp_path: Path) -> None:
    path = _variant(tmp_path, "  clock: virtual", "  clock: virtual\n  url: http://x")
    with pytest.raises(ConfigError) as info:
        load_study(path)
    [problem] = info.value.problems
    assert problem.loc == ("backend", "url")
    assert problem.message == "unknown key 'url' (expected one of: kind, clock, faults)"


def test_several_problems_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _variant(tmp_path, "max_num_seqs: 256", "max_num_seqs: 0")
    path.write_text(path.read_text().replace("max_trials: 12", "max_trials: -1"))
    errors = _errors(path, capsys)
    assert [e.split(": ")[2] for e in errors] == ["engine.max_num_seqs", "budget.max_trials"]


def test_every_unknown_name_is_said_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the first catalogue error of a study was shown: a new user fixed the GPU, ran
    again, fixed the model, ran again..."""
    path = _variant(tmp_path, "gpu: h100-sxm", "gpu: h999")
    text = path.read_text().replace("model: llama-3.1-8b", "model: llama-9000")
    path.write_text(text.replace("workload: chat ", "workload: chats ").replace(
        "max_num_seqs: 256", "max_num_seqs: 0"))  # fmt: skip
    errors = _errors(path, capsys)
    fields = [e.split(": ")[2] for e in errors]
    assert fields == ["gpu", "model", "workload", "engine.max_num_seqs"], errors


def test_a_config_set_error_names_config_set(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", str(QUICKSTART), "--config-set", "max_num_seqs=abc", "--config-set", "=3"]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        "kneepoint: --config-set =3: expected PATH=VALUE"
    ]
    assert main(argv[:4]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("kneepoint: --config-set max_num_seqs=abc: engine.max_num_seqs: ")


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        ("gpu: h100-sxm", "gpu: h999", "gpu", "unknown GPU 'h999'"),
        ("model: llama-3.1-8b", "model: llama-9", "model", "neither a catalogue model"),
        ("workload: chat ", "workload: chats ", "workload", "neither a preset"),
        ("    - async_scheduling", "    - async_sched", "search.knobs[6]", "no knob named"),
        ("max_model_len: 8192", "max_model_len: 2048", "workload", "exceeds max_model_len"),
        ("max_model_len: 8192", "max_model_len: 200000", "engine.max_model_len", "context"),
        ("  max_trials: 12", "  deadline: 7am", "budget.deadline", "time of day"),
        ("kind: slo_capacity", "kind: goodput_at_rate", "objective.rate_rps", "missing"),
        ("kind: sim", "kind: simulator", "backend", "does not match any of the expected tags"),
        # An infinite budget would silently switch the limit off; NaN was already refused.
        ("max_device_hours: 8", "max_device_hours: .inf", "budget.max_device_hours", "finite"),
        ("max_device_hours: 8", "max_device_hours: .nan", "budget.max_device_hours", "finite"),
        # The absurd value is named, not the sane one it is compared with.
        (
            "max_num_seqs: 256",
            "max_num_seqs: 100000000000000000000000000000",
            "engine.max_num_seqs",
            "exceeds max_num_batched_tokens",
        ),
        ("max_num_seqs: 256", "max_num_seqs: 1.0e+29", "engine.max_num_seqs", "integer"),
    ],
)
def test_semantic_problems_are_located(
    tmp_path: Path, old: str, new: str, field: str, words: str
) -> None:
    path = _variant(tmp_path, old, new)
    with pytest.raises(ConfigError) as info:
        load_study(path)
    [problem] = info.value.problems
    assert str(problem).startswith(f"{path}:")
    assert f": {field}: " in str(problem)
    assert words in problem.message


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert _errors(missing, capsys) == [
        f"kneepoint: {missing}: cannot read file: No such file or directory"
    ]


@pytest.mark.parametrize("body", ["", "- a\n- b\n", "just text\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, body: str) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_study(path)


def test_real_entry_point_exits_2_without_traceback(tmp_path: Path) -> None:
    path = _variant(tmp_path, "gpu_memory_utilization: 0.9", "gpu_memory_utilization: 1.3")
    done = subprocess.run(
        [sys.executable, "-m", "kneepoint.cli.main", "config", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "gpu_memory_utilization" in done.stderr and "Traceback" not in done.stderr
