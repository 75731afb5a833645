"""A launched server's watchdog: stops the server's process group when the agent that launched
it dies, however it dies (kill -9 included), so a server never holds a GPU all night.

The agent keeps the write end of a pipe whose read end is this process's stdin. Nothing is
ever written: when the agent exits for any reason the kernel closes its end, the read here
returns end-of-file, and the watchdog stops the group (SIGTERM, then SIGKILL after a grace
period), unless the leader is gone and no member of its group is left. The leader's identity
is its pid plus its start time, so a pid reused by another process is never signalled. An
agent that stops the server itself closes the pipe afterwards, and the watchdog finds nothing
left to stop.

The server's socket folder (its ``VLLM_RPC_BASE_PATH``) goes with it: an agent killed with
SIGKILL cannot remove it, and a night of such runs would leave one a server in /tmp.

    python -I .../kneepoint/probes/server/watchdog.py PGID STARTED PIDFILE SOCKETS

It imports nothing of kneepoint (a package's imports cost a short-lived process most of its
start): the process identity it checks (``group_alive``, from /proc) lives here, and the
agent's ``process`` module imports it from here.

(stdin: the agent's pipe)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

GRACE_S = 15.0
"""As ServerProcess.stop: vLLM frees the GPU and its workers on SIGTERM within seconds."""


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first); [] if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat.rsplit(")", 1)[-1].split()


def group_members(pgid: int, started: str) -> list[int]:
    """Live processes in group ``pgid`` that started no earlier than its leader did: what
    is left of a server whose leader already died (vLLM's engine core and workers)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if (
            len(fields) > 19
            and fields[0] != "Z"
            and fields[2] == str(pgid)
            and int(fields[19]) >= int(started)
        ):
            members.append(int(entry.name))
    return members


def group_alive(pgid: int, started: str) -> bool:
    """Whether the group whose leader was ``pgid``, started at ``started``, still has a live
    process (the leader itself, or members that outlived it)."""
    if not started.isdigit():  # no identity to check against: never signal a stranger
        return False
    leader = stat_fields(pgid)
    if leader and leader[0] != "Z":
        # A live process holds the pid. Linux does not hand out a pid that is still some
        # live process's group id, so if this is not our leader, our group is gone and the
        # pid (and any group it leads) belongs to a stranger.
        return len(leader) > 19 and leader[19] == started
    return bool(group_members(pgid, started))


def stop_group(pgid: int, started: str, grace_s: float = GRACE_S) -> bool:
    """SIGTERM the group, SIGKILL what is left after ``grace_s``; False if it was gone."""
    if not group_alive(pgid, started):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid, started):
        time.sleep(0.1)
    if group_alive(pgid, started):  # never signal a group id that is no longer ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return True


def main(argv: list[str]) -> int:
    pgid, started, pid_file, sockets = int(argv[0]), argv[1], Path(argv[2]), Path(argv[3])
    # Ctrl-C at the agent's terminal must not take the watchdog down before the server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):  # only end-of-file ends this: the agent is gone
        pass
    if stop_group(pgid, started) and _names(pid_file, pgid, started):
        pid_file.unlink(missing_ok=True)  # a resumed run may have written its own since
    shutil.rmtree(sockets, ignore_errors=True)  # this server's alone (ServerProcess)
    return 0


def _names(pid_file: Path, pgid: int, started: str) -> bool:
    try:
        return pid_file.read_text().splitlines()[:2] == [str(pgid), started]
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
