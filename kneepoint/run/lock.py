"""The run folder's lock: one agent at a time works on a run folder.

The agent holds an exclusive advisory lock (``flock``) on ``<run>/.lock`` for as long as it
works on the folder; a second agent on the same folder is refused at once, told who holds it.
The kernel drops the lock when its holder dies, however it dies (SIGKILL included), so a run
killed mid-step resumes at once: the file stays behind, but without a lock on it it means
nothing and never blocks. The holder writes its pid, host and start time into the file only so
that the refusal can name it.

``flock`` is local to one machine: two hosts sharing a run folder over NFS are not kept apart.
"""

from __future__ import annotations

import fcntl
import os
import socket
from datetime import datetime
from pathlib import Path

from kneepoint.config import ConfigError, Problem

LOCK_NAME = ".lock"


class RunLockedError(ConfigError, RuntimeError):
    """The folder the user named is held by another live agent; ``holder`` says who, as it
    wrote itself."""

    def __init__(self, folder: Path, holder: str) -> None:
        busy = (
            f"another agent is working on this run ({holder}); wait for it to end, or stop it "
            "and resume"
        )
        super().__init__([Problem(str(folder), None, (), busy)])
        self.folder, self.holder = folder, holder


class RunLock:
    """A held lock on one run folder, until ``release`` or the process's end."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def take(cls, folder: Path, now: datetime) -> RunLock:
        """Lock ``folder`` or raise ``RunLockedError`` at once (never waits)."""
        path = folder / LOCK_NAME
        # Not inherited by the servers the agent starts (O_CLOEXEC, and subprocess closes
        # other fds): a server outliving a killed agent must not keep its folder locked.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunLockedError(folder, holder) from None
        except BaseException:
            os.close(fd)
            raise
        since = now.isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}\n".encode(), 0)
        return cls(path, fd)

    def moved_to(self, folder: Path) -> None:
        """The folder was renamed (a new run built beside, then put in place): the lock is on
        the file, not the name, so it is still held."""
        self.path = folder / LOCK_NAME

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None


def try_lock(folder: Path, now: datetime) -> RunLock | None:
    """The lock if it is free, else None: for sweeping folders nobody works on any more."""
    try:
        return RunLock.take(folder, now)
    except RunLockedError:
        return None


def _holder(fd: int) -> str:
    text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    # Empty: the holder has the lock but has not written its name yet (a moment's window).
    return f"held by {text}" if text else "held by another agent"
