"""A session fixture's value made once per test session, not once per xdist worker.

Each xdist worker is a process of its own, so a session-scoped fixture runs in every worker
that needs it: a whole `kneepoint tune` (5-7 s of CPU on the simulator) computed twice on a
two-core host. The first worker to ask makes the value under a lock in the session's shared
temporary folder and writes it down as JSON; the others wait on the lock and read it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from typing import Any

import pytest


def session_once(
    factory: pytest.TempPathFactory, name: str, make: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``make()``'s value (JSON-able), made by one worker of the session and read by the
    rest. Outside xdist the session's folder is this process's own: ``make`` runs here."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return make()
    shared = factory.getbasetemp().parent  # the session's folder, above each worker's own
    kept = shared / f"{name}.json"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the worker dies
        if kept.exists():
            value: dict[str, Any] = json.loads(kept.read_text())
            return value
        value = make()
        partial = kept.with_suffix(".partial")
        partial.write_text(json.dumps(value))
        partial.rename(kept)  # whole or absent: a worker that died mid-write leaves no value
        return value
