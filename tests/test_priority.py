"""A launched server runs below the agent's CPU priority, its session's autogroup too (on a
2-core host the group's niceness is what lets the load generator wake on time)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kneepoint.probes.server.priority import autogroup_nice, lower_priority


def test_a_server_in_its_own_session_runs_lower_and_so_does_its_group() -> None:
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        lower_priority(server.pid, 5)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == min(19, mine + 5)
        mine_group = autogroup_nice("self")
        if mine_group is not None:  # Linux with autogroup scheduling that shows its niceness
            assert autogroup_nice(server.pid) == min(19, mine_group + 5)
    finally:
        server.kill()
        server.wait()


def test_a_server_that_is_gone_is_logged_not_raised() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    lower_priority(gone.pid, 5)  # its pid no longer names a process: nothing raises


@pytest.mark.parametrize(
    ("text", "nice"), [("/autogroup-42 nice 3\n", 3), ("", None), ("/autogroup-7 nice \n", None)]
)
def test_an_autogroup_file_without_a_niceness_reads_as_none(
    text: str, nice: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Path, "read_text", lambda self: text)
    assert autogroup_nice(1) == nice
