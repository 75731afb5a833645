"""The one line every benchmark prints first: the commit and the library versions its figures
were made with (CI installs them from constraints.txt), so a figure quoted in the docs can be
tied to what produced it."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("kneepoint", "optuna", "numpy", "pydantic", "httpx", "ray", "torch")
"""The libraries a figure depends on: the agent, its sampler, its numerics, its records, its
client, the scale-out and the GP sampler's backend."""


def line() -> str:
    """``versions: commit <hash>[+dirty] | python 3.x | optuna 5.1.0 | ...``; a package
    not installed reads "none"."""
    parts = [f"commit {_commit()}", f"python {platform.python_version()}"]
    for name in PACKAGES:
        try:
            parts.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name} none")
    return "versions: " + " | ".join(parts)


def _commit() -> str:
    """The checkout's commit, ``+dirty`` where the worktree differs; "unknown" outside git."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")
