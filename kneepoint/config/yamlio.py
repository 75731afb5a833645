"""Strict YAML reading that remembers where every value came from.

PyYAML silently keeps the last of two equal keys; a study file with ``max_num_seqs`` twice would
then tune something other than what its author reads. Here a repeated key is an error, and the
node tree is kept so that a validation error can name the line of the offending field.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kneepoint.config.errors import ConfigError, Problem
from kneepoint.config.yaml_bounds import TOO_DEEP, check_depth, check_expansion

_KEY_LINE = re.compile(r"^( *)(- +)?([A-Za-z_][\w\-]*) *:(?:\s|$)")


class _Strict(yaml.constructor.SafeConstructor):
    """Refuses a repeated key, and names a scalar its tag cannot hold."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears more than once", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A scalar its tag cannot hold (`!!int 3.5`, an integer of 5,000 digits: past
        # Python's limit on int(), `!!timestamp xyz`) raised a bare ValueError or
        # AttributeError from PyYAML's constructors: named here, with its line.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError, AttributeError) as exc:
            tag = node.tag.rsplit(":", 1)[-1]
            said = str(exc).split(";")[0].split(":")[0]
            problem = (
                f"not a {tag}"
                if isinstance(exc, AttributeError)
                else f"{tag} value that cannot be read: {said}"
            )
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from exc


class _StrictLoader(_Strict, yaml.SafeLoader):
    """PyYAML's pure-Python parser, whose error messages the user reads."""


if yaml.__with_libyaml__:  # PyYAML's wheels are built with it; a source build may not be

    class _CStrictLoader(_Strict, yaml.CSafeLoader):
        """libyaml's parser, for files that parse."""


@dataclass(frozen=True)
class YamlDoc:
    """A parsed YAML document, its node tree (for line numbers) and where it was read."""

    source: str
    data: Any
    root: yaml.Node | None

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        """1-based line of the deepest node along ``loc`` that exists in the file."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            node = _child(node, part)
            if node is None:
                break
            line = node.start_mark.line + 1
        return line


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == str(part):
                found: yaml.Node = value_node
                return found
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        child: yaml.Node = node.value[part]
        return child
    return None


def _fast(text: str, source: str) -> tuple[Any, yaml.Node | None] | None:
    """libyaml's parse of a file whose characters PyYAML's reader accepts (None: it failed,
    or the text holds a character PyYAML refuses, or PyYAML has no libyaml). The GPU
    catalogue reads in 1.3 ms here against 12.2 ms in pure Python (1,415 studies and
    catalogues are read in the fast test tier); libyaml's error messages are not PyYAML's,
    so a file it cannot parse is parsed again in Python, for them."""
    if not yaml.__with_libyaml__ or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return None
    # as the parse below would, its reader having passed; by libyaml's scanner too (PyYAML's
    # took 4.8 ms of the catalogue's 5.8 when the parse alone was libyaml's)
    check_depth(text, source, _CStrictLoader)
    try:
        return load(_CStrictLoader(text))
    except (yaml.YAMLError, RecursionError):
        return None


def load(loader: yaml.SafeLoader | yaml.CSafeLoader) -> tuple[Any, yaml.Node | None]:
    """The document ``loader`` reads, and its node tree; the loader is disposed of."""
    try:
        root = loader.get_single_node()
        return (loader.construct_document(root) if root is not None else None), root
    finally:
        loader.dispose()


def parse_yaml(text: str, source: str) -> YamlDoc:
    """Parse one YAML document; syntax errors become a one-line ConfigError."""
    fast = _fast(text, source)
    if fast is not None:
        check_expansion(fast[0], source)
        return YamlDoc(source=source, data=fast[0], root=fast[1])
    try:
        # The reader refuses control characters as it is built, before any parsing.
        loader = _StrictLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        problem = f"not YAML text: control character #x{exc.character:04x} is not allowed"
        raise ConfigError([Problem(source, line, None, problem)]) from exc
    try:
        check_depth(text, source)
        data, root = load(loader)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_syntax_problem(exc, text, source)]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(source, None, None, f"YAML error: {exc}")]) from exc
    except RecursionError as exc:  # the parser recurses once per level
        raise ConfigError([Problem(source, None, None, TOO_DEEP)]) from exc
    check_expansion(data, source)
    return YamlDoc(source=source, data=data, root=root)


def _syntax_problem(exc: yaml.MarkedYAMLError, text: str, source: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    problem = exc.problem or exc.context or "invalid YAML"
    if isinstance(exc, yaml.constructor.ConstructorError):
        return Problem(source, line, None, problem)
    if exc.context and exc.context_mark is not None and exc.problem:
        problem += f" ({exc.context} that starts on line {exc.context_mark.line + 1})"
    column = f", column {mark.column + 1}" if mark is not None else ""
    start = exc.context_mark or mark
    loc = _enclosing_keys(text, start.line) if start is not None else ()
    return Problem(source, line, loc or None, f"YAML syntax error{column}: {problem}")


def _enclosing_keys(text: str, line_index: int) -> tuple[str | int, ...]:
    """The keys (and list indices) that enclose a line, judged by indentation: the file
    cannot be parsed, so this is the best a syntax error can say about its field."""
    stack: list[tuple[int, str | int]] = []
    items: dict[tuple[str | int, ...], int] = {}
    for raw in text.splitlines()[: line_index + 1]:
        found = _KEY_LINE.match(raw)
        if not found:
            continue
        indent, dash, key = len(found.group(1)), found.group(2), found.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if dash:
            parent = tuple(part for _, part in stack)
            items[parent] = items.get(parent, -1) + 1
            stack.append((indent, items[parent]))
            indent += len(dash)
        stack.append((indent, key))
    return tuple(part for _, part in stack)


def read_text(path: Path) -> str:
    """A configuration file's text; an unreadable file is a one-line ConfigError."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([Problem(str(path), None, None, f"cannot read file: {reason}")]) from exc


def read_yaml(path: Path) -> YamlDoc:
    """Read and parse a YAML file."""
    return parse_yaml(read_text(path), str(path))


def read_mapping(path: Path) -> YamlDoc:
    """Read a YAML file whose top level must be a mapping."""
    doc = read_yaml(path)
    if not isinstance(doc.data, dict):
        kind = "empty" if doc.data is None else f"a {type(doc.data).__name__}"
        raise ConfigError(
            [Problem(doc.source, 1, None, f"the top level must be a mapping of keys, not {kind}")]
        )
    return doc
