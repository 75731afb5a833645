"""A server process: launched in its own process group, watched, classified, stopped.

Used for real ``vllm serve`` and for ``kneepoint sim serve`` alike. The whole process group
is the unit: vLLM forks engine-core and worker processes, and stopping only the parent
leaves them holding the GPU. Output goes to a log file in the run folder, which is also what
failures are classified from, in vLLM's own words (``kneepoint.probes.server.server_failure``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import structlog

from kneepoint.probes.client import tls_context
from kneepoint.probes.runtime import redact_file
from kneepoint.probes.server.priority import lower_priority
from kneepoint.probes.server.server_failure import Failure, ServerFailedError, classify
from kneepoint.probes.server.watchdog import group_alive, stat_fields
from kneepoint.records import inherited_env

log = structlog.get_logger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """One launched server. Use as a context manager: leaving it stops the process group."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        unset: Sequence[str] = (),
        nice: int = 0,
    ) -> None:
        """``env`` is added to the agent's environment (less its secrets:
        ``inherited_env``) for the server, ``unset`` taken out;
        ``nice``: how much lower the server's CPU priority is than the agent's (its engine
        processes, started later, inherit it)."""
        self.argv = list(argv)
        self.log_path = log_path
        self.started = False
        """Whether it has answered /health: an exit before that is no crash."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        # vLLM's engine talks to its API server over ZMQ sockets it names under /tmp and
        # leaves there when stopped by a signal (768 in /tmp after two sessions of the real
        # tier): they go to a folder of this server's own, removed with it.
        self._sockets = Path(tempfile.mkdtemp(prefix="kneepoint-ipc-"))
        own = {"VLLM_RPC_BASE_PATH": str(self._sockets)}
        environment = {**inherited_env(os.environ), **own, **(env or {})}
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in environment.items() if k not in unset},
            start_new_session=True,
        )
        if nice:
            lower_priority(self.proc.pid, nice)
        # If the agent dies without stopping it, its watchdog stops the group at once, and
        # failing that the next run reaps the group by this file.
        self.pid_path = log_path.with_suffix(".pid")
        try:
            started = _started(self.proc.pid)
            self.pid_path.write_text(f"{self.proc.pid}\n{started}\n{boot_id()}\n")
            self._lifeline, self._watchdog = _watch(
                self.proc.pid, started, self.pid_path, self._sockets
            )
        except BaseException:
            # No watchdog and no caller to stop it: the server must not outlive this.
            self._signal_group(signal.SIGKILL)
            self.proc.wait()
            self._log.close()
            self.pid_path.unlink(missing_ok=True)
            shutil.rmtree(self._sockets, ignore_errors=True)
            raise

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def failure(self, *, silent_s: float = 0.0) -> Failure:
        return classify(self.log_text(), self.proc.poll(), silent_s=silent_s, started=self.started)

    def wait_healthy(self, url: str, timeout_s: float, *, hang_after_s: float = 300.0) -> None:
        """Poll ``/health`` until 200. Raises ServerFailedError if the process exits, its log
        goes silent for ``hang_after_s`` (hung), or ``timeout_s`` passes (timed out)."""
        start = time.monotonic()
        last_size, last_growth = -1, start
        pause_s = _FIRST_POLL_S
        with httpx.Client(timeout=2.0, verify=tls_context()) as client:
            while True:
                if not self.alive():
                    raise ServerFailedError(self.failure())
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{url}/health").status_code == 200:
                        self.started = True
                        return
                now = time.monotonic()
                size = self.log_path.stat().st_size
                if size != last_size:
                    last_size, last_growth = size, now
                if now - last_growth > hang_after_s:
                    raise ServerFailedError(self.failure(silent_s=now - last_growth))
                if now - start > timeout_s:
                    raise ServerFailedError(self.failure())
                # waiting on the process, not sleeping: an exit ends the wait at once
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=pause_s)
                pause_s = min(_LAST_POLL_S, pause_s * 1.5)

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s``."""
        try:
            if self.alive():
                self._signal_group(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=grace_s)
            # Children can outlive a parent that exited: the group goes either way.
            self._signal_group(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        finally:
            self._log.close()
            redact_file(self.log_path)
            self.pid_path.unlink(missing_ok=True)
            os.close(self._lifeline)  # the watchdog wakes, finds nothing left, and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=grace_s)
            shutil.rmtree(self._sockets, ignore_errors=True)
        return self.proc.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


_FIRST_POLL_S, _LAST_POLL_S = 0.02, 0.25
"""``/health`` is polled at first every 20 ms, then less often, at most every 250 ms: the
simulated server answers within a second of starting, where a fixed 250 ms cost each start
125 ms on average (69 starts in the fast test tier, 17 s asleep); vLLM takes minutes, polled
as before."""


def _watch(
    pgid: int, started: str, pid_path: Path, sockets: Path
) -> tuple[int, subprocess.Popen[bytes]]:
    """Start the group's watchdog (kneepoint.probes.server.watchdog); returns the pipe end whose
    closing, by this process or by its death, tells the watchdog to act."""
    read_end, write_end = os.pipe()  # not inherited by later children (PEP 446)
    argv = [str(pgid), started, str(pid_path), str(sockets)]
    try:
        watchdog = subprocess.Popen(
            # By its path, isolated (-I: no PYTHONPATH, nothing of this package on sys.path):
            # it imports nothing of kneepoint, so it starts in 0.02 s, not the package's 0.74.
            [sys.executable, "-I", str(Path(__file__).with_name("watchdog.py")), *argv],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return write_end, watchdog


def _started(pid: int) -> str:
    """When a process started (clock ticks since boot, from /proc): with the pid, an identity
    no later process can share. '' where it cannot be read, or the process is a zombie (dead,
    waiting for a parent that may never reap it)."""
    fields = stat_fields(pid)
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else ""


def boot_id() -> str:
    """This boot's id (''where unknown): pid files from an earlier boot name no process of
    ours, however their numbers line up."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def reap_orphans(folder: Path) -> list[int]:
    """Stop the process groups of servers a killed agent left running under ``folder`` (found
    by their ``.pid`` files; a pid since reused by another process is left alone, and a
    group whose leader died is found by its members). Returns the group ids stopped."""
    stopped = []
    for pid_file in sorted(folder.rglob("*.pid")):
        lines = pid_file.read_text().splitlines()
        if len(lines) < 2 or not lines[0].isdigit() or not lines[1].isdigit():
            pid_file.unlink(missing_ok=True)
            continue
        pid, started = int(lines[0]), lines[1]
        same_boot = len(lines) < 3 or lines[2] == boot_id()
        if same_boot and group_alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                stopped.append(pid)
        pid_file.unlink(missing_ok=True)
    return stopped
