"""The package's import direction (``ALLOWED`` below; docs/development.md's Layout table says
what each part is for) holds: policies stay pure, records depend on nothing, and no library
module prints."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .conftest import REPO
from .support.layering import ALLOWED

PACKAGE = REPO / "kneepoint"
# The policies' four concepts: what binds is read first, then the knobs it leaves and where
# to look among them; the judge stands alone.
POLICIES = {
    "diagnosis": set(),
    "pruning": {"diagnosis"},
    "search": {"diagnosis"},
    "judge": set(),
}
SIDE_EFFECT_MODULES = {
    "subprocess", "socket", "httpx", "pynvml", "psutil", "asyncio", "sqlite3", "sqlalchemy",
    "optuna.storages",  # Optuna keeps its studies through a storage the agent opens
}  # fmt: skip


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layering(path: Path) -> None:
    part = path.relative_to(PACKAGE).parts[0]
    for name in _imports(path):
        if name.startswith("kneepoint."):
            target = name.split(".")[1]
            assert target == part or target in ALLOWED[part], f"{part} imports {name}"
    if part in {"policies", "records", "physics", "load"}:
        found = {prefix for n in _imports(path) for prefix in (n.split(".")[0], n[:15])}
        assert not found & SIDE_EFFECT_MODULES, found & SIDE_EFFECT_MODULES


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "policies").rglob("*.py")), ids=lambda p: p.parent.name + "/" + p.name
)
def test_the_policies_concepts_import_only_what_they_read(path: Path) -> None:
    parts = path.relative_to(PACKAGE / "policies").parts
    if len(parts) == 1:
        assert parts == ("__init__.py",), f"{path.name}: every policy belongs to one concept"
        return
    for name in _imports(path):
        if name.startswith("kneepoint.policies."):
            target = name.split(".")[2]
            allowed = POLICIES[parts[0]] | {parts[0]}
            assert target in allowed, f"policies/{parts[0]} imports {name}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_code_never_prints(path: Path) -> None:
    if path.relative_to(PACKAGE).parts[0] == "cli":
        return  # the command line is where output to a person belongs
    calls = [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
    ]
    assert not calls, f"{path} calls print()"


DOMAINS = {"IntDomain", "FloatDomain", "BoolDomain", "ChoiceDomain"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_knob_domains_answer_for_themselves(path: Path) -> None:
    """Outside records no code asks a knob domain its class (``isinstance`` or ``match``):
    the domain answers what is asked of it (``kneepoint.records.knob_domains``)."""
    if path.relative_to(PACKAGE).parts[0] == "records":
        return
    asked = [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance")
        or isinstance(node, ast.MatchClass)
        if {getattr(n, "id", None) for n in ast.walk(node)} & DOMAINS
    ]
    assert not asked, f"{path} asks a knob domain its class at lines {asked}"


# Programs are started by argv lists, never through a shell: a value that reaches a command
# line (a model name, a flag, a path) must not be able to become shell syntax.
SHELL_CALLS = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
               "asyncio.create_subprocess_shell", "pty.spawn"}  # fmt: skip
ARGV_CALLS = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
              "subprocess.check_output", "asyncio.create_subprocess_exec"}  # fmt: skip


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _shell_argv(argv: ast.List) -> bool:
    words = [e.value for e in argv.elts if isinstance(e, ast.Constant)]
    shells = {"sh", "bash", "zsh", "dash", "/bin/sh", "/bin/bash", "/usr/bin/env"}
    return bool(words) and words[0] in shells and "-c" in words


def shell_uses(source: str) -> list[str]:
    """Every way ``source`` could run a command through a shell, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name in SHELL_CALLS:
            found.append(f"{node.lineno}: {name}")
        if any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value
                                         is False) for k in node.keywords):  # fmt: skip
            found.append(f"{node.lineno}: shell= on {name or 'a call'}")
        first = node.args[0] if node.args else None
        if name in ARGV_CALLS and isinstance(first, ast.Constant | ast.JoinedStr | ast.BinOp):
            found.append(f"{node.lineno}: {name} with a command string")
        if name in ARGV_CALLS and isinstance(first, ast.List) and _shell_argv(first):
            found.append(f"{node.lineno}: {name} runs a shell with -c")
    return found


def test_the_shell_rule_catches_every_form() -> None:
    source = (
        "import os, subprocess\n"
        "os.system('ls')\n"
        "os.popen('ls')\n"
        "subprocess.run('ls -l', shell=True)\n"
        "subprocess.Popen(f'vllm serve {model}')\n"
        "subprocess.check_output(['ls'], shell=flag)\n"
        "subprocess.run(['bash', '-c', command])\n"
        "subprocess.run(['ls', '-l'], shell=False)\n"
    )
    assert [u.split(":")[0] for u in shell_uses(source)] == ["2", "3", "4", "4", "5", "6", "7"]


def _python_sources() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(REPO / "scripts").rglob("*.py")])


@pytest.mark.parametrize("path", _python_sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_command_goes_through_a_shell(path: Path) -> None:
    assert not shell_uses(path.read_text()), f"{path}: {shell_uses(path.read_text())}"


TESTS = REPO / "tests"
HISTORY = re.compile(
    r"\b20\d\d-[01]\d-[0-3]\d\b"  # a date
    r"|\bStep \d+\b|\bissue[ :]+\W?Step"  # the tracker's steps
    r"|\bat (?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b"  # "at <commit>"
)


def test_the_package_states_contracts_not_history() -> None:
    """No date, Step reference or commit under kneepoint/: the why of a change and its
    figures go to its commit body and benchmarks/README.md, a constant names its source by
    path."""
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_history_rule_catches_every_form() -> None:
    caught = ["(2026-12-03)", 'issue "Step 17"', "Step 7", "(real recordings at b0c96fd)"]
    kept = ["YYYY-MM-DDTHH:MM", "a step of 7", "at 1234567 tokens", "stepped 2 steps"]
    assert all(HISTORY.search(text) for text in caught)
    assert not any(HISTORY.search(text) for text in kept)


def test_tests_share_helpers_only_through_support() -> None:
    """A test module imports no other test module: what two share lives in tests/support/
    (or is a conftest fixture), so moving or deleting a test never breaks another."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            package = path.parent.relative_to(REPO).parts
            base = package[: len(package) - node.level + 1] if node.level else ()
            name = ".".join([*base, node.module])
            parts = name.split(".")
            if parts[0] == "tests" and len(parts) > 1 and parts[1] not in {"support", "conftest"}:
                found.append(f"{path.relative_to(REPO)}: from {name}")
    assert not found, found
