"""libyaml and PyYAML read every YAML file the project ships alike: the same data, and the same
line for every value (``kneepoint.config.yamlio`` parses in C and falls back to Python)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kneepoint.config import yamlio

REPO = Path(__file__).resolve().parent.parent
FILES = sorted(
    p for folder in ("configs", "tests/fixtures") for p in (REPO / folder).rglob("*.y*ml")
)


def _lines(node: yaml.Node | None) -> list[tuple[int, int]]:
    """Every node's start (line, column), depth first."""
    if node is None:
        return []
    found = [(node.start_mark.line, node.start_mark.column)]
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            found += _lines(key) + _lines(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found += _lines(item)
    return found


def test_the_project_ships_yaml_files() -> None:
    assert len(FILES) > 20


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_libyaml_reads_each_shipped_file_as_pyyaml_does(path: Path) -> None:
    text = path.read_text()
    fast = yamlio._fast(text, str(path))
    if fast is None:  # a file libyaml cannot parse is PyYAML's to refuse
        with pytest.raises(yaml.YAMLError):
            yamlio.load(yamlio._StrictLoader(text))
        return
    data, root = yamlio.load(yamlio._StrictLoader(text))
    assert fast[0] == data
    assert _lines(fast[1]) == _lines(root)
