"""One error tree: every error the agent raises derives from ``KneepointError``, carries its
exit status, and reaches the command line's one ``except`` as lines (with the notes a command
added to say where its work is kept); ``kneepoint.records.errors`` draws the tree as the code
has it."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from kneepoint.cli import plan as cli_plan
from kneepoint.cli.main import main
from kneepoint.config import ConfigError, Problem
from kneepoint.records import EXIT_INTERRUPTED, KneepointError, noted
from kneepoint.records import errors as error_module
from kneepoint.run import LedgerError, RunFolderError, RunLockedError

from .conftest import REPO

PACKAGE = REPO / "kneepoint"
NOT_THE_AGENTS = {"ApiError", "StreamCutError", "RequestRejectedError", "_HoldsItselfError"}
"""The simulated server's own HTTP errors, and one a YAML reader keeps to itself."""


def _defined() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.append((".".join(path.relative_to(REPO).with_suffix("").parts), node.name))
    return found


def _agents_own() -> dict[str, type[KneepointError]]:
    return {
        name: getattr(importlib.import_module(module), name)
        for module, name in _defined()
        if name not in NOT_THE_AGENTS
    }


def test_every_error_of_the_agents_own_has_one_root() -> None:
    errors = _agents_own()
    assert len(errors) >= 14, errors
    for name, error in errors.items():
        assert issubclass(error, KneepointError), name


def _drawn(cls: type[KneepointError], depth: int = 0) -> list[tuple[int, str, int]]:
    rows = [(depth, cls.__name__, cls.exit_code)]
    for child in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
        rows += _drawn(child, depth + 1)
    return rows


def test_the_modules_docstring_draws_the_tree_the_code_has() -> None:
    _agents_own()  # every subclass imported
    picture = [
        line
        for line in (error_module.__doc__ or "").splitlines()
        if re.match(r"\s+(KneepointError|[│├└ ]+──)", line)
    ]
    drawn = []
    for line in picture:
        name = re.search(r"[A-Z]\w+Error", line)
        assert name is not None, line
        depth = (name.start() - picture[0].index("KneepointError")) // 4
        drawn.append((depth, name.group(), int(line[name.end() :].split()[0])))
    assert drawn == _drawn(KneepointError)


def test_an_error_of_its_own_that_reaches_the_command_line_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(_args: object) -> int:
        raise LedgerError(Path("runs/x/ledger.jsonl"), 3, "a promotion of trial 9, never proposed")

    monkeypatch.setattr(cli_plan, "run_plan", fails)
    code = main(["plan", "configs/studies/quickstart.yaml"])
    assert code == 2  # a run the user named whose ledger is damaged: bad input, by line
    assert capsys.readouterr().err == (
        "kneepoint: runs/x/ledger.jsonl:3: a promotion of trial 9, never proposed\n"
    )


def test_every_error_of_its_own_ends_a_command_with_the_status_it_carries(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One root carries the exit status: a failed run 1, bad input 2 (each problem a line)."""
    problems = [Problem("study.yaml", 4, ("slo",), "missing"), Problem("study.yaml", 9, (), "x")]

    def refuses(_args: object) -> int:
        raise ConfigError(problems)

    monkeypatch.setattr(cli_plan, "run_plan", refuses)
    assert main(["plan", "configs/studies/quickstart.yaml"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"kneepoint: {p}" for p in problems]
    assert KneepointError("failed").exit_code == 1 and ConfigError(problems).exit_code == 2


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (RunFolderError(Path("runs/r"), "not a kneepoint run folder"), "runs/r: not a kneepoint"),
        (RunLockedError(Path("runs/r"), "pid 7"), "runs/r: another agent is working on this run"),
    ],
)
def test_a_run_folder_the_user_named_says_itself_as_bad_input(
    error: KneepointError, line: str
) -> None:
    assert error.exit_code == 2 and error.lines()[0].startswith(line)


@pytest.mark.parametrize("failure", [KneepointError("the server died"), KeyboardInterrupt()])
def test_what_a_command_keeps_follows_the_line_that_ends_it(
    failure: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    written: list[str] = []

    def keep() -> str:
        written.append("sweep.json")  # the note runs once, after the failure: it may write
        return "; the 3 points measured are in out/sweep.json"

    def fails(_args: object) -> int:
        with noted(keep):
            raise failure

    monkeypatch.setattr(cli_plan, "run_plan", fails)
    code = main(["plan", "configs/studies/quickstart.yaml"])
    head = "interrupted" if isinstance(failure, KeyboardInterrupt) else "the server died"
    assert code == (EXIT_INTERRUPTED if isinstance(failure, KeyboardInterrupt) else 1)
    assert capsys.readouterr().err == (
        f"kneepoint: {head}; the 3 points measured are in out/sweep.json\n"
    )
    assert written == ["sweep.json"]


def test_a_note_of_nothing_adds_nothing() -> None:
    with pytest.raises(KeyboardInterrupt) as raised, noted(lambda: ""):
        raise KeyboardInterrupt
    assert not getattr(raised.value, "__notes__", None)


def test_the_command_line_has_one_except() -> None:
    """Foreign errors are turned into the tree where they enter; the command line says what
    reaches it in one place (``kneepoint.cli.main._run``)."""
    sites = [
        f"{path.name}:{node.lineno}"
        for path in sorted((PACKAGE / "cli").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Try) and node.handlers
    ]
    assert len(sites) == 1 and sites[0].startswith("main.py:"), sites
