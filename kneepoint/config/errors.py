"""Configuration problems as one line each: file, line, field path and what is wrong.

``ConfigError`` is the only exception the config layer raises. The CLI prints its lines and
exits 2; nothing in it is a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Loc = tuple[str | int, ...]


def render_loc(loc: Sequence[str | int]) -> str:
    """``('workload', 'classes', 0, 'weight')`` -> ``workload.classes[0].weight``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one field of one source (a file, or a --set override)."""

    source: str
    line: int | None
    loc: Loc | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        field = render_loc(self.loc) if self.loc else ""
        return f"{where}: {field}: {self.message}" if field else f"{where}: {self.message}"


class ConfigError(Exception):
    """One or more configuration problems, each printable as a single line."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("a ConfigError needs at least one problem")
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]
