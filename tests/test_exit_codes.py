"""Every failure path of `kneepoint` exits 2 (bad input, told before any work) or 1 (the run
failed), each with one ``kneepoint: `` line on stderr and no traceback."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from datetime import datetime
from pathlib import Path
from unittest import mock

import pytest

from kneepoint.cli import main as cli
from kneepoint.cli.main import main
from kneepoint.config import load_study
from kneepoint.records.ledger import RunStarted
from kneepoint.run import write_atomically
from kneepoint.run.folder import RunFolder

from .conftest import QUICKSTART, TuneRun


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    failures = [line for line in err.splitlines() if line.startswith("kneepoint: ")]
    assert len(failures) == 1, err
    assert "Traceback" not in err and "usage:" not in err
    return failures[0]


@pytest.mark.parametrize(
    "argv",
    [["frobnicate"], ["config", "check", str(QUICKSTART), "--bogus"], ["tune", "--resume"]],
)
def test_a_usage_error_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert "--help)" in _one_line(capsys)


def _outputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Commands given an output path that cannot be written, and what each must say."""
    a_file, a_dir = tmp_path / "file", tmp_path / "dir"
    a_file.write_text("x")
    a_dir.mkdir()
    q = str(QUICKSTART)
    return {
        "log-file": (["--log-file", str(a_dir), "config", "check", q],
                     f"--log-file {a_dir}: is a directory, not a file"),
        "schema": (["config", "schema", "--output", str(a_dir)],
                   f"--output {a_dir}: is a directory, not a file"),
        "tune": (["tune", q, "--runs-dir", str(a_file)],
                 f"--runs-dir {a_file}: exists and is not a directory"),
        "sweep": (["sweep", q, "--out", str(a_file / "x.json")],
                  f"--out {a_file / 'x.json'}: {a_file} is a file, not a directory"),
        "plan": (["plan", q, "--out", str(a_file)],
                 f"--out {a_file}: exists and is not a directory"),
        "calibrate": (["calibrate", str(a_dir), "--out", str(a_dir)],
                      f"--out {a_dir}: is a directory, not a file"),
        "diagnose": (["diagnose", "--from", str(a_dir), "--runs-dir", str(a_file)],
                     f"--runs-dir {a_file}: exists and is not a directory"),
    }  # fmt: skip


@pytest.mark.parametrize(
    "command", ["log-file", "schema", "tune", "sweep", "plan", "calibrate", "diagnose"]
)
def test_an_output_path_that_cannot_be_written_is_bad_input_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    argv, said = _outputs(tmp_path)[command]
    assert main(argv) == 2
    assert _one_line(capsys) == f"kneepoint: {said}"


@pytest.mark.parametrize(
    "argv",
    [["config", "schema", "--output", "/proc/kneepoint/schema.json"],
     ["sweep", str(QUICKSTART), "--out", "/proc/kneepoint/x.json"]],
)  # fmt: skip
def test_a_place_that_refuses_even_root_is_bad_input_before_any_work(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """As root every os.access test passes: `sweep --out /proc/...` ran its whole sweep and
    then exited 1."""
    assert main(argv) == 2
    line = _one_line(capsys)
    assert (
        line.startswith(f"kneepoint: {argv[-2]} /proc/kneepoint/")
        and "/proc is not writable" in line
    )


def test_the_os_refusing_a_file_mid_run_is_a_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = OSError(28, "No space left on device", str(tmp_path / "schema.json"))
    with mock.patch.object(cli, "write_atomically", side_effect=full):
        assert main(["config", "schema", "--output", str(tmp_path / "schema.json")]) == 1
    line = _one_line(capsys)
    assert line == f"kneepoint: {tmp_path / 'schema.json'}: No space left on device"


def test_a_baseline_that_failed_is_a_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama-3.1-70B does not fit an L4: the simulated engine refuses it, as vLLM would."""
    sets = ["gpu=l4", "model=llama-3.1-70b", "engine.max_model_len=8192",
            "slo={default: {ttft_p99_ms: 100000}}"]  # fmt: skip
    argv = ["tune", str(QUICKSTART), "--runs-dir", str(tmp_path)]
    assert main([*argv, *(a for s in sets for a in ("--set", s))]) == 1
    line = _one_line(capsys)
    assert line.startswith(f"kneepoint: {tmp_path}/quickstart-")
    assert ": the baseline failed: startup_failed: " in line
    [run] = tmp_path.iterdir()
    assert (run / "report.md").is_file()  # the report still says what happened


def test_a_server_that_does_not_answer_is_a_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["diagnose", "--url", "http://127.0.0.1:9", "--gpu", "h100-sxm", "--model",
            "llama-3.1-8b", "--workload", "chat", "--runs-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 1
    assert _one_line(capsys).startswith("kneepoint: http://127.0.0.1:9 does not answer: ")


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (b"\xff\xfe\x00", "study.yaml cannot be read: 'utf-8' codec can't decode byte 0xff"),
        (b"- 1\n", "study.yaml is damaged: its top level: Input should be a valid dictionary"),
        (b"name: 5\n", "study.yaml is damaged: name: Input should be a valid string"),
    ],
)
def test_a_run_folder_with_a_damaged_study_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: bytes, said: str
) -> None:
    folder = RunFolder.create(tmp_path, load_study(QUICKSTART), datetime.now().astimezone())
    folder.release()
    (folder.path / "study.yaml").write_bytes(damage)
    for command in ("report", "tune"):
        assert main([command, str(folder.path)]) == 2
        assert _one_line(capsys).startswith(f"kneepoint: {folder.path}: {said}")


def test_calibrating_a_folder_without_recordings_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", str(tmp_path), "--out", str(tmp_path / "c.yaml")]) == 2
    assert _one_line(capsys) == f"kneepoint: {tmp_path}: holds no recording (sweep.json)"


def test_files_written_whole_are_as_readable_as_the_umask_allows(tmp_path: Path) -> None:
    """A run folder's files were 0600 (the temporary file's mode) under umask 022: teammates
    could not read the report (issue "Step 13")."""
    mask = os.umask(0o022)
    os.umask(mask)
    target = tmp_path / "report.md"
    write_atomically(target, "# report\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_a_log_file_that_cannot_be_opened_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A path the access check lets through (root passes every one: /proc is "writable")
    gave a FileNotFoundError traceback from the log's setup."""
    code = main(["--log-file", "/proc/kneepoint-none/events.jsonl", "config", "check",
                 str(QUICKSTART)])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("kneepoint: --log-file /proc/"), err


def test_a_full_disk_mid_run_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A write on a full disk names no file: it ended in a traceback (issue "Step 13")."""
    full = OSError(errno.ENOSPC, "No space left on device")
    with mock.patch.object(cli, "_config_check", side_effect=full):
        code = main(["config", "check", str(QUICKSTART)])
    err = capsys.readouterr().err.splitlines()
    assert code == 1 and err == ["kneepoint: No space left on device"], err


def test_an_output_file_is_named_in_its_error_not_its_temporary_neighbour(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError) as info:
        write_atomically(tmp_path / "a-file" / "report.md", "x")
    assert info.value.filename == str(tmp_path / "a-file" / "report.md")


def test_a_run_whose_study_was_edited_is_not_resumed(
    tmp_path: Path, small_run: TuneRun, capsys: pytest.CaptureFixture[str]
) -> None:
    """Editing a run folder's study.yaml between sessions resumed silently and judged
    challengers against a baseline measured under another study (issue "Step 13")."""
    folder = tmp_path / small_run.folder.name
    shutil.copytree(small_run.folder, folder)
    started = RunFolder.existing(folder).ledger.recover()[0]
    assert isinstance(started, RunStarted) and started.study_sha256 is not None
    study = folder / "study.yaml"
    study.write_text("# a comment and spacing do not change the study\n" + study.read_text())
    assert main(["tune", str(folder)]) == 0  # finished already: nothing to do but the report
    study.write_text(study.read_text().replace("ttft_p99_ms: 1000.0", "ttft_p99_ms: 900.0"))
    capsys.readouterr()
    assert main(["tune", str(folder)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "study.yaml was changed since the run started" in line, line
