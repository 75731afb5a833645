"""A launched server runs below the agent's CPU priority, its session's autogroup too (on a
2-core host the group's niceness is what lets the load generator wake on time)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kneepoint.probes.priority import lower_priority


def _group_nice(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[-1])


def test_a_server_in_its_own_session_runs_lower_and_so_does_its_group() -> None:
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        lower_priority(server.pid, 5)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == min(19, mine + 5)
        if Path(f"/proc/{server.pid}/autogroup").exists():  # Linux with autogroup scheduling
            assert _group_nice(server.pid) == min(19, _group_nice("self") + 5)
    finally:
        server.kill()
        server.wait()


def test_a_server_that_is_gone_is_logged_not_raised() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    lower_priority(gone.pid, 5)  # its pid no longer names a process: nothing raises
