"""Files the agent writes: whole or not at all, and checked writable before the work."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kneepoint.config import ConfigError, Problem


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_MODE = 0o666 & ~_umask()
"""What ``open`` would give a new file: mkstemp's 0600 made teammates unable to read a run
folder's report under umask 022 (issue "Step 13")."""


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temporary file beside it, then a rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    try:
        os.fchmod(fd, _MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # named by the file asked for, not its temporary neighbour
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
