"""A launched server's process group: identified by its leader's pid and start time, so a
stale pid file never gets a stranger signalled, and never left running when its launch fails
half-way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kneepoint.probes.server import process
from kneepoint.probes.server.process import ServerProcess, reap_orphans
from kneepoint.probes.server.watchdog import group_alive


def test_a_stale_pid_file_does_not_name_a_process_that_reused_the_pid(tmp_path: Path) -> None:
    # A new group leader whose start time is not the one on file: e.g. a container restart
    # handing out low pids again while a pid file survived.
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert not group_alive(stranger.pid, "1")
        (tmp_path / "server.pid").write_text(f"{stranger.pid}\n1\n")
        assert reap_orphans(tmp_path) == []
        assert stranger.poll() is None  # still running: never signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_a_pid_file_from_another_boot_is_ignored(tmp_path: Path) -> None:
    mine = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        started = process._started(mine.pid)
        (tmp_path / "server.pid").write_text(f"{mine.pid}\n{started}\nanother-boot\n")
        assert group_alive(mine.pid, started)
        assert reap_orphans(tmp_path) == [] and mine.poll() is None
    finally:
        mine.kill()
        mine.wait()


def test_a_launch_that_fails_after_the_server_started_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_watchdog(*args: object) -> None:
        raise OSError("too many open files")

    monkeypatch.setattr(process, "_watch", no_watchdog)
    with pytest.raises(OSError, match="too many open files"):
        ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"],
                      tmp_path / "server.log")  # fmt: skip
    assert not _running("time.sleep(60)")
    assert not (tmp_path / "server.pid").exists()


def _running(fragment: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``fragment``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if fragment in cmdline and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def test_the_servers_ipc_sockets_go_with_it(tmp_path: Path) -> None:
    """vLLM names its engine's ZMQ sockets under VLLM_RPC_BASE_PATH and leaves them behind
    when signalled: each server gets a folder of its own, removed when it stops."""
    marker = tmp_path / "said"
    leave = (
        "import os, pathlib, socket, time\n"
        "base = pathlib.Path(os.environ['VLLM_RPC_BASE_PATH'])\n"
        "socket.socket(socket.AF_UNIX).bind(str(base / 'engine-ipc'))\n"
        f"pathlib.Path({str(marker)!r} + '.tmp').write_text(str(base))\n"
        f"os.replace({str(marker)!r} + '.tmp', {str(marker)!r})\n"  # whole, or not there
        "time.sleep(60)\n"
    )
    with ServerProcess([sys.executable, "-c", leave], tmp_path / "server.log") as server:
        while not marker.exists() and server.alive():  # waits on the server's own word
            time.sleep(0.01)
        folder = Path(marker.read_text())
        assert (folder / "engine-ipc").is_socket()
    assert not folder.exists()


def test_an_agent_killed_outright_leaves_no_socket_folder(tmp_path: Path) -> None:
    """SIGKILL gives the agent no chance to clean up: the server's watchdog stops the server
    and removes its socket folder (an empty kneepoint-ipc-* was seen in /tmp after a run)."""
    marker = tmp_path / "said"
    server = (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(marker)!r} + '.tmp').write_text(os.environ['VLLM_RPC_BASE_PATH'])\n"
        f"os.replace({str(marker)!r} + '.tmp', {str(marker)!r})\n"  # whole, or not there
        "time.sleep(120)\n"
    )
    agent = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from kneepoint.probes.server.process import ServerProcess\n"
        f"ServerProcess([sys.executable, '-c', {server!r}], Path({str(tmp_path / 's.log')!r}))\n"
        "time.sleep(120)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", agent])
    try:
        while not marker.exists() and process.poll() is None:  # the server's own word
            time.sleep(0.01)
        folder = Path(marker.read_text())
        assert folder.is_dir()
        while not (found := _running(str(tmp_path / "s.pid"))) and process.poll() is None:
            time.sleep(0.01)  # the agent starts the watchdog just after the server
        [watchdog] = [psutil.Process(pid) for pid in found]
        process.kill()
        process.wait()
        psutil.wait_procs([watchdog], timeout=600)  # its own exit, however slow the host
        assert not folder.exists()
        assert not _running(str(marker))
    finally:
        if process.poll() is None:
            process.kill()


def test_the_watchdog_imports_nothing_of_kneepoint(tmp_path: Path) -> None:
    """Every launched server starts one; importing the package would cost it most of its
    start (0.74 s against 0.02 s here, 2026-12-05), on the cores the server needs."""
    import ast

    watchdog = Path(process.__file__).with_name("watchdog.py")
    tree = ast.parse(watchdog.read_text())
    names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert names and not [n for n in names if n.startswith("kneepoint")], names
    # As the agent starts it, for a group long gone (a pid past any pid_max): its pipe at
    # end-of-file, it finds nothing to stop and takes the socket folder.
    sockets = tmp_path / "sockets"
    sockets.mkdir()
    argv = ["4194304", "1", str(tmp_path / "pid"), str(sockets)]
    done = subprocess.run(
        [sys.executable, "-I", str(watchdog), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not sockets.exists()
