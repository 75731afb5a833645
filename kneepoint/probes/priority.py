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
    if not group.exists():
        return
    try:
        mine = int(Path("/proc/self/autogroup").read_text().split("nice")[-1])
        group.write_text(f"{min(19, mine + nice)}\n")
    except (OSError, ValueError) as exc:
        log.warning("server.group_priority_unchanged", pid=pid, nice=nice, error=str(exc))
