"""Each package names its public API in its ``__init__`` (its face: ``__all__``), and a module
reaches another package only through that face, so what a package offers is one page to read
and its modules can move inside it without touching anyone else (Step 19)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "kneepoint"
FACES = sorted(PACKAGE.rglob("__init__.py"))


def _dotted(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PACKAGES = {_dotted(face) for face in FACES}


def _package_of(module: str) -> str:
    return module if module in PACKAGES else module.rsplit(".", 1)[0]


def _face(package: str) -> set[str]:
    return set(importlib.import_module(package).__all__)


@pytest.mark.parametrize("face", FACES, ids=_dotted)
def test_every_package_names_its_face(face: Path) -> None:
    package = importlib.import_module(_dotted(face))
    names = package.__all__
    assert all(hasattr(package, name) for name in names)
    # A face may name one of its modules whole (a namespace such as ``config.arguments``), but
    # no other thing by a module's name: that would hide the module from ``from package
    # import`` and from every patch by dotted path.
    modules = {p.stem for p in face.parent.glob("*.py")} | {
        p.name for p in face.parent.iterdir() if (p / "__init__.py").exists()
    }
    for name in set(names) & modules:
        assert getattr(package, name) is sys.modules[f"{package.__name__}.{name}"], name


def _own_package(path: Path) -> str:
    return _dotted(path) if path.name == "__init__.py" else _dotted(path).rsplit(".", 1)[0]


def _crossings(source: str, own: str) -> list[tuple[int, str, list[str]]]:
    """The imports of another package's modules: (line, module, names)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("kneepoint.")]
            found += [(node.lineno, name, []) for name in names]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("kneepoint.")
            and _package_of(node.module or "") != own
        ):
            found.append((node.lineno, node.module or "", [a.name for a in node.names]))
    return found


@pytest.mark.parametrize(
    "path", sorted(p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE), ids=_dotted
)
def test_a_module_reaches_another_package_only_through_its_face(path: Path) -> None:
    for line, module, names in _crossings(path.read_text(), _own_package(path)):
        where = f"{path.relative_to(REPO)}:{line}"
        assert module in PACKAGES, f"{where} imports {module}, not its package's face"
        assert set(names) <= _face(module), f"{where}: {set(names) - _face(module)} not in the face"


def test_the_face_rule_sees_every_crossing_and_nothing_inside() -> None:
    source = (
        "from kneepoint.records.ledger import Finished\n"
        "import kneepoint.sim.engine\n"
        "from kneepoint.tune.budget import Budget\n"  # its own package: free
        "from kneepoint.records import Finished\n"
    )
    found = [module for _, module, _ in _crossings(source, "kneepoint.tune")]
    assert found == ["kneepoint.records.ledger", "kneepoint.sim.engine", "kneepoint.records"]
    assert "kneepoint.records.ledger" not in PACKAGES and "kneepoint.records" in PACKAGES
