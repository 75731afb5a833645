"""Where a command was asked to write, checked writable before the work that fills it, not
after (``sweep --out /proc/x`` once ran its whole sweep first)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kneepoint.config.errors import ConfigError, Problem


def output_problem(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` cannot become the file (or directory) a command was asked to write, told
    before the work that fills it rather than after; None if nothing says it cannot."""
    try:
        if path.exists():
            wrong = path.is_dir() != directory
            return (
                None
                if not wrong
                else (
                    "exists and is not a directory" if directory else "is a directory, not a file"
                )
            )
        parent = next(p for p in path.parents if p.exists())
    except OSError as exc:
        return exc.strerror or str(exc)
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    # A file made and dropped, not os.access: root passes every access test, and /proc or a
    # read-only mount refuses root all the same (`sweep --out /proc/x` once ran its whole
    # sweep first).
    try:
        with tempfile.TemporaryFile(dir=parent, prefix=".kneepoint-probe."):
            return None
    except OSError as exc:
        return f"{parent} is not writable ({exc.strerror or exc})"


def check_output(option: str, path: Path, *, directory: bool = False) -> None:
    """Raise a one-line ConfigError where ``output_problem`` finds one."""
    problem = output_problem(path, directory=directory)
    if problem is not None:
        raise ConfigError([Problem(f"{option} {path}", None, None, problem)])
