"""``--set path.to.field=value`` overrides applied to a study before it is validated.

Values are read as YAML scalars or flow collections (``8``, ``0.9``, ``false``, ``null``,
``[a, b]``, ``{kind: fixed, tokens: 64}``), so an override means what the same text would mean
in the file. Integer path parts index into lists: ``workload.classes.0.weight=2``, also spelled
as error messages print it, ``workload.classes[0].weight=2``.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, NoReturn

import yaml

from kneepoint.config.errors import ConfigError, Loc, Problem
from kneepoint.config.yaml_bounds import TOO_DEEP, check_depth, check_expansion

_KEY = re.compile(r"^[A-Za-z_][\w\-]*$")
_INDEXED = re.compile(r"^([A-Za-z_][\w\-]*)((?:\[\d+\])+)$")


def add_overrides_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """The repeatable ``--set PATH=VALUE`` option, collected into ``args.overrides``."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help=help_text,
    )


@dataclass(frozen=True)
class Override:
    """One parsed ``--set`` argument (or another flag's, such as sweep's ``--config-set``)."""

    text: str
    loc: Loc
    value: Any
    flag: str = "--set"
    """The option it came from, as the user typed it: errors name it."""

    @property
    def source(self) -> str:
        return f"{self.flag} {self.text}"

    def explains(self, loc: Loc) -> bool:
        """Whether a problem at ``loc`` may come from this override: it set that field, a
        parent of it, or something inside it."""
        shorter = min(len(loc), len(self.loc))
        return bool(loc) and loc[:shorter] == self.loc[:shorter]


def parse_override(text: str, flag: str = "--set", under: Loc = ()) -> Override:
    """``text`` (PATH=VALUE) as an override of the field at ``under`` + PATH; problems name
    ``flag`` and the text as given."""
    source = f"{flag} {text}"
    path, sep, raw_value = text.partition("=")
    if not sep or not path.strip():
        raise ConfigError([Problem(source, None, None, "expected PATH=VALUE")])
    loc: list[str | int] = list(under)
    for part in path.strip().split("."):
        indexed = _INDEXED.match(part)
        if part.isdigit():
            loc.append(int(part))
        elif _KEY.match(part):
            loc.append(part)
        elif indexed:  # the spelling error messages use: classes[0]
            loc.append(indexed.group(1))
            loc += [int(i) for i in re.findall(r"\[(\d+)\]", indexed.group(2))]
        else:
            problem = f"{part!r} is not a field name or list index"
            raise ConfigError([Problem(source, None, None, problem)])
    try:
        check_depth(raw_value, source)
        value = yaml.safe_load(raw_value) if raw_value.strip() else ""
        check_expansion(value, source)
    except yaml.YAMLError as exc:
        problem = f"value is not valid YAML: {str(exc).splitlines()[0]}"
        raise ConfigError([Problem(source, None, tuple(loc), problem)]) from exc
    except RecursionError as exc:
        raise ConfigError([Problem(source, None, tuple(loc), TOO_DEEP)]) from exc
    return Override(text=text, loc=tuple(loc), value=value, flag=flag)


def apply_override(data: dict[str, Any], override: Override) -> None:
    """Set the value at the override's path in ``data`` (in place), creating mappings on the
    way; validation afterwards rejects keys that do not exist."""
    node: Any = data
    for depth, part in enumerate(override.loc[:-1]):
        nxt = override.loc[depth + 1]
        node = _step(node, part, override, want_list=isinstance(nxt, int))
    _assign(node, override.loc[-1], override)


def _step(node: Any, part: str | int, override: Override, want_list: bool) -> Any:
    if isinstance(part, int):
        _check_index(node, part, override)
        return node[part]
    if not isinstance(node, dict):
        _fail(override, f"cannot set a field inside a {type(node).__name__}")
    if not isinstance(node.get(part), dict | list):
        node[part] = [] if want_list else {}
    return node[part]


def _assign(node: Any, part: str | int, override: Override) -> None:
    if isinstance(part, int):
        _check_index(node, part, override)
        node[part] = override.value
    elif isinstance(node, dict):
        node[part] = override.value
    else:
        _fail(override, f"cannot set a field inside a {type(node).__name__}")


def _check_index(node: Any, index: int, override: Override) -> None:
    if not isinstance(node, list):
        _fail(override, f"index {index} used on a {type(node).__name__}, not a list")
    if index >= len(node):
        _fail(override, f"index {index} is out of range (the list has {len(node)} items)")


def _fail(override: Override, problem: str) -> NoReturn:
    raise ConfigError([Problem(override.source, None, override.loc, problem)])
