"""Every `kneepoint` command the README and docs/ show in a shell block stays true: the
command line parses as written (subcommand, flags, their values), every file it names under
configs/ exists, and the quick ones (checking and listing the catalogues and study files)
run to exit 0. A page whose command drifts from the program fails here, not in a user's
terminal."""

from __future__ import annotations

import re
import shlex
from glob import glob
from pathlib import Path

import pytest

from kneepoint.cli.main import build_parser, main
from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"&", "&&", "|", ";", "2>&1"}
"""Where the shell takes over from the command (redirections, pipes, background jobs)."""
RUN = ("config check", "config list", "config schema")
"""Subcommands quick enough to run for real here (seconds, no server)."""
ON_THE_SIMULATOR = ("--set", "backend={kind: sim, clock: virtual}", "--set", "budget.max_trials=1")
"""What the slow tier adds to a documented command that measures: the study's GPU server is
the simulator's, and a tune runs one trial (the command line, its files and its run folder
are what is checked, not a night's search)."""
ELSEWHERE = {
    "diagnose --url": "an attached server's diagnosis needs one listening: test_diagnose_cli",
}
"""Documented commands the slow tier does not run as written, and the tests that run them."""


def _commands(page: Path) -> list[str]:
    """The `kneepoint ...` lines of the page's shell blocks, continuations joined and
    trailing comments cut."""
    found: list[str] = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()
            if re.match(r"^(\.venv/bin/)?kneepoint\s", command):
                found.append(command)
    return found


COMMANDS = [(page, c) for page in PAGES for c in _commands(page)]


def _argv(command: str) -> list[str]:
    """The argument vector, optional parts ``[--flag X]`` kept as written but unbracketed."""
    words = shlex.split(command.replace("[", " ").replace("]", " "), posix=False)
    ends = [i for i, w in enumerate(words) if w in SHELL or w.startswith(">")]
    return words[1 : min(ends, default=len(words))]


def test_the_pages_show_commands() -> None:
    assert len(COMMANDS) >= 10
    assert any(page.name == "README.md" for page, _ in COMMANDS)


@pytest.mark.parametrize(
    ("page", "command"), COMMANDS, ids=[f"{p.name}:{c[:60]}" for p, c in COMMANDS]
)
def test_a_documented_command_parses_and_names_files_that_exist(page: Path, command: str) -> None:
    argv = _argv(command)
    args, unknown = build_parser().parse_known_args(argv)
    assert not unknown or getattr(args, "takes_unknown", False), f"{page.name}: {unknown}"
    for word in argv:
        if word.startswith("configs/"):
            assert (REPO / word).exists(), f"{page.name} names {word}, which is not there"


@pytest.mark.parametrize(
    ("page", "command"),
    [(p, c) for p, c in COMMANDS if " ".join(_argv(c)[:2]) in RUN],
    ids=lambda v: v.name if isinstance(v, Path) else v[:60],
)
def test_a_quick_documented_command_runs(
    page: Path, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("configs",):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "STUDY.yaml").symlink_to(REPO / "configs" / "studies" / "quickstart.yaml")
    assert main(_argv(command)) == 0, f"{page.name}: {command}"


ON_RAY = ("--gpus", "--ray")
"""A tune over several GPUs needs Ray and its cluster: tests/test_ray_cluster.py runs them."""


def _elsewhere(argv: list[str]) -> bool:
    joined = " ".join(argv)
    return any(joined.startswith(p) for p in ELSEWHERE) or any(f in argv for f in ON_RAY)


@pytest.mark.slow  # a plan, a one-trial tune, two diagnoses and a calibration (~6 min)
def test_every_documented_command_runs_in_page_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page's commands in turn, as a reader runs them (a calibration reads the
    diagnoses before it), in a folder holding the repository's configs and the pages'
    placeholder study files (the quickstart, named as the page names it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    quickstart = (REPO / "configs" / "studies" / "quickstart.yaml").read_text()
    (tmp_path / "STUDY.yaml").write_text(quickstart)
    renamed = quickstart.replace("name: quickstart", "name: my-gpu-study")
    (tmp_path / "my-gpu-study.yaml").write_text(renamed)
    ran = []
    for page, command in COMMANDS:
        argv = _argv(command)
        if _elsewhere(argv):
            continue
        argv = [w for word in argv for w in sorted(glob(word)) or [word]]
        if argv[0] in ("tune", "diagnose"):
            argv += ON_THE_SIMULATOR
        assert main(argv) == 0, f"{page.name}: {command}"
        ran.append(argv[0])
    assert {"plan", "tune", "diagnose", "calibrate", "config"} <= set(ran)
    assert (tmp_path / "my-gpu.calibration.yaml").exists()
