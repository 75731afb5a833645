"""Bounds on what a YAML text may make of itself: how deep it nests and how many values its
aliases expand to. Both are checked without recursing past the bound or expanding anything:
PyYAML's composer recurses once per level, and a 1 KB "billion laughs" of nine levels of
nine aliases is 387,420,489 strings to anything that walks it (pydantic quoting a tagged
union's tag built its whole repr: 140 s and 18 GB for one study file).
"""

from __future__ import annotations

from typing import Any

import yaml

from kneepoint.config.errors import ConfigError, Problem

MAX_DEPTH = 64
"""Nesting a YAML study or ``--set`` value may have (the shipped studies nest 4 levels):
past it the text is refused before PyYAML's composer recurses once per level, which took
1.3 s to reach Python's recursion limit on 2,500 brackets."""
TOO_DEEP = f"nested too deeply to read (lists or mappings more than {MAX_DEPTH} levels down)"
_OPENS = (
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
)
_CLOSES = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def check_depth(
    text: str, source: str, scanner: type[yaml.SafeLoader | yaml.CSafeLoader] | None = None
) -> None:
    """ConfigError where collections nest deeper than MAX_DEPTH, from the scanner's tokens
    (a loop, not a recursion); syntax errors are left to the parse that follows.
    ``scanner``: the loader whose scanner reads the tokens (PyYAML's, unless the parse that
    follows is libyaml's)."""
    depth = 0
    try:
        for token in yaml.scan(text, Loader=scanner or yaml.SafeLoader):
            if isinstance(token, _OPENS):
                depth += 1
                if depth > MAX_DEPTH:
                    line = token.start_mark.line + 1
                    raise ConfigError([Problem(source, line, None, TOO_DEEP)])
            elif isinstance(token, _CLOSES):
                depth -= 1
    except yaml.YAMLError:
        return


MAX_VALUES = 100_000
"""Values a study may expand to through its aliases (the shipped studies hold under 200)."""


def check_expansion(data: Any, source: str) -> None:
    """ConfigError where aliases make ``data`` stand for more than MAX_VALUES values, naming
    the top-level key that does; a shared list or mapping is counted once per use, from a
    count memoised per object, so nothing is expanded."""
    memo: dict[int, int] = {}
    keys = data.items() if isinstance(data, dict) else [(None, data)]
    for key, value in keys:
        loc = (key,) if isinstance(key, str | int) and not isinstance(key, bool) else None
        try:
            count = _count(value, memo)
        except _HoldsItselfError:
            problem = "holds itself through an alias (an anchor used inside its own value)"
            raise ConfigError([Problem(source, None, loc, problem)]) from None
        if count > MAX_VALUES:
            problem = (
                f"its aliases expand to {count:,} values (at most {MAX_VALUES:,} are "
                "read): a YAML alias bomb?"
            )
            raise ConfigError([Problem(source, None, loc, problem)])


_WALKING = -1


class _HoldsItselfError(Exception):
    pass


def _count(node: Any, memo: dict[int, int]) -> int:
    """Values ``node`` stands for; _HoldsItselfError where it holds itself (``&a [*a]``)."""
    if not isinstance(node, dict | list):
        return 1
    known = memo.get(id(node))
    if known == _WALKING:
        raise _HoldsItselfError
    if known is not None:
        return known
    memo[id(node)] = _WALKING
    children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
    count = 1 + sum(_count(child, memo) for child in children)
    memo[id(node)] = count
    return count
