"""The import direction of DESIGN.md holds: policies stay pure, records depend on nothing,
and no library module prints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "kneepoint"
# What each part of the package may import from kneepoint (besides itself).
ALLOWED = {
    "records": set(),
    "physics": {"records"},
    "config": {"records"},
    "policies": {"records", "physics", "load"},
    "load": {"records"},
    "sim": {"records", "config", "physics", "load"},
    "probes": {"records", "config", "physics", "load", "sim"},
    "calibration": {"records", "config", "physics", "load", "sim", "policies"},
    # the plan runs knee searches (probes.sweep) on the virtual clock, never a server
    "planning": {"records", "config", "physics", "load", "sim", "probes"},
    "agent": {
        "records",
        "config",
        "physics",
        "load",
        "probes",
        "policies",
        "sim",
        "calibration",
        "planning",
    },
}
SIDE_EFFECT_MODULES = {"subprocess", "socket", "httpx", "pynvml", "psutil", "asyncio"}


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
        assert not {n.split(".")[0] for n in _imports(path)} & SIDE_EFFECT_MODULES


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_library_code_never_prints(path: Path) -> None:
    if path.name == "cli.py" or path.name.startswith("cli_"):
        return  # the command line (cli.py and its commands) is where output to a person belongs
    calls = [
        node
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
    ]
    assert not calls, f"{path} calls print()"
