"""The package imports in one direction: no module reaches, at run time, a module that reaches
it back (imports under ``if TYPE_CHECKING:`` are annotations only and do not count), and the
parts' allowed imports (``tests.support.layering.ALLOWED``) leave no back-edge."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import REPO
from .support.layering import ALLOWED

PACKAGE = REPO / "kneepoint"


def _name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py")}


def _annotation_only(tree: ast.Module) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` blocks."""
    return {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for node in ast.walk(statement)
    }


def _target(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def runtime_imports(name: str) -> set[str]:
    """The package's modules ``name`` imports when it runs (a submodule where a
    ``from package import name`` names one)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skipped, found = _annotation_only(tree), set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _target(name, path, node)
            found |= {
                f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module
                for a in node.names
            }
    return {m for m in found if m in MODULES and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = {name: runtime_imports(name) for name in MODULES}
    # A module reaches another package through its face, and the face reaches its modules.
    assert "kneepoint.measure" in graph["kneepoint.tune.diagnose"]
    assert "kneepoint.measure.diagnosis" in graph["kneepoint.measure"]
    assert cycles(graph) == []


def test_the_parts_layering_has_no_back_edge() -> None:
    assert cycles({part: set(allowed) for part, allowed in ALLOWED.items()}) == []
