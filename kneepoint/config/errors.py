"""Configuration problems as one line each: file, line, field path and what is wrong.

``ConfigError`` is the only exception the config layer raises. The CLI prints its lines and
exits 2; nothing in it is a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from kneepoint.records import EXIT_BAD_INPUT, KneepointError, mask_shapes

Loc = tuple[str | int, ...]


# Characters str.splitlines breaks at: a key or value holding one must not split a problem's
# line in two (a terminal, or a test reading stderr line by line, would see two problems).
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def render_loc(loc: Sequence[str | int]) -> str:
    """``('workload', 'classes', 0, 'weight')`` -> ``workload.classes[0].weight``; a key that
    is empty or holds unprintable characters is quoted (``slo.classes['\\t']``)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not part or not part.isprintable():
            text += f"[{part!r}]"
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
        text = f"{where}: {field}: {self.message}" if field else f"{where}: {self.message}"
        # The source quotes what the user typed (a --set value), which may hold a secret.
        return mask_shapes(text.translate(_LINE_BREAKS))


class ConfigError(KneepointError):
    """One or more configuration problems, each printable as a single line."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("a ConfigError needs at least one problem")
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


def first_problem(exc: ValidationError) -> str:
    """A validation's first problem as ``where: what`` (pydantic's dotted location; the
    message alone where the document itself is wrong), for a line about a file or a body
    that is not the record it should be."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])
