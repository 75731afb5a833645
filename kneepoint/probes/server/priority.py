"""A launched server's CPU priority below the agent's: on a shared host the load generator
must wake on time while the server it measures keeps the cores busy
(``measurement.server_nice``)."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def lower_priority(pid: int, nice: int) -> None:
    """Lower a just-started server's CPU priority (the agent's own niceness plus ``nice``):
    it forks its engine core and workers only after seconds of imports, so they inherit it.
    The server leads a session of its own, which Linux's autogroup scheduling
    (``sched_autogroup_enabled``) weighs as one group against the agent's: there a thread's
    niceness counts only inside its group, so the group's is set too (measured on the 2-core
    machine while a server ran: a 5 ms ticker beside it was late by 18-204 ms at p99 with
    the group at 0, 1.2-1.8 ms at 10, with the server's threads at +10 either way)."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice))
    except OSError as exc:
        log.warning("server.priority_unchanged", pid=pid, nice=nice, error=str(exc))
    group = Path(f"/proc/{pid}/autogroup")
    mine = autogroup_nice("self")
    if mine is None or not group.exists():
        return
    try:
        group.write_text(f"{min(19, mine + nice)}\n")
    except OSError as exc:
        log.warning("server.group_priority_unchanged", pid=pid, nice=nice, error=str(exc))


def autogroup_nice(pid: int | str) -> int | None:
    """A process's autogroup niceness (``/autogroup-42 nice 0``), or None where the kernel
    has no autogroup scheduling or shows the file empty (a sandboxed kernel did, in CI)."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text()
    except OSError:
        return None
    _, sep, value = text.partition(" nice ")
    try:
        return int(value) if sep else None
    except ValueError:
        return None
