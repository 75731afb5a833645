"""A real PostgreSQL server for tests: one per session, a fresh database per test.

The scale-out worker shares one Optuna study through PostgreSQL; its tests need the real
server (row locks, concurrent claims), not SQLite. `postgres_url` starts one from the
installed binaries (`initdb`, `pg_ctl`) in a temporary folder, listening on 127.0.0.1 only
on a free port with fsync off, and stops it (`pg_ctl stop -m immediate`) when the session
ends, however it ends. `postgres_db` gives a test its own database on that server.

Without the binaries the tests that use them are skipped with the way to get them, except
in CI (`CI=true`), where every tier must really run and a missing server fails them.
PostgreSQL refuses to run as root; as root the server runs as `postgres` (Debian's
package creates it), else `nobody`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

SUPERUSER = "kneepoint"
DATABASE = "kneepoint"
MISSING = "PostgreSQL's initdb/pg_ctl not found: apt-get install postgresql"
_TIMEOUT_S = 60


def find_bindir() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`: PATH, then `pg_config --bindir`, then the
    newest `/usr/lib/postgresql/*/bin` (Debian keeps them off PATH)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(initdb).resolve().parent
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                  timeout=10, check=True)  # fmt: skip
            candidates.append(Path(done.stdout.strip()))
    versions = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(versions, key=_version_key, reverse=True)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def _version_key(bindir: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", bindir.parent.name)) or (0,)


def _unprivileged_user() -> str | None:
    """Whom to run the server as: None when not root, else `postgres`, else `nobody`."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root and neither user postgres nor nobody exists")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """One running server: its folder, port and the user it runs as (None: this user)."""

    bindir: Path
    folder: Path
    user: str | None
    port: int = 0

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def url(self, database: str = DATABASE) -> str:
        """SQLAlchemy's URL of a database on this server, psycopg 3 as its driver."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.user is not None:
            command = [*_as_user(self.user), *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S,
                              check=False, cwd=self.folder)  # fmt: skip

    def init(self) -> None:
        """`initdb` the data folder: trust on local connections, UTF8, no fsync."""
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        (self.folder / "socket").mkdir()
        if self.user is not None:
            os.chown(self.folder / "socket", entry.pw_uid, entry.pw_gid)
        done = self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust",
                         "-E", "UTF8", "--no-locale", "--no-sync")  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.folder / 'socket'}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/support/postgres_server.py\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self, attempts: int = 3) -> None:
        """Start on a free port, waiting until it accepts connections; another port if a
        process took the chosen one first."""
        for _ in range(attempts):
            self.port = _free_port()
            done = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                             "-t", str(_TIMEOUT_S), "-o", f"-p {self.port}", "start")  # fmt: skip
            if done.returncode == 0:
                return
            self.stop()
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {done.stdout}{done.stderr}{log[-2000:]}")

    def stop(self) -> None:
        """Stop at once; if pg_ctl cannot, kill the postmaster (its children follow it)."""
        pidfile = self.data / "postmaster.pid"
        if not pidfile.exists():
            return
        pid = None
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pidfile.read_text().split()[0])
        done = self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        if done.returncode != 0 and pid is not None and pidfile.exists():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def watchdog(self) -> subprocess.Popen[bytes]:
        """A process that stops the server and removes its folder once this one is gone,
        however it goes (kill -9, a CI timeout): the server is not this process's child."""
        stop = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]
        if self.user is not None:
            stop = [*_as_user(self.user), *stop]
        script = ('while kill -0 "$1" 2>/dev/null; do sleep 1; done; folder=$2; shift 2; '
                  '"$@" >/dev/null 2>&1; rm -rf "$folder"')  # fmt: skip
        return subprocess.Popen(["sh", "-c", script, "sh", str(os.getpid()), str(self.folder),
                                 *stop], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip

    def execute(self, sql: str, params: tuple[str, ...] = ()) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE need that)."""
        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER,
                             dbname="postgres", autocommit=True) as conn:  # fmt: skip
            conn.execute(sql.encode(), params)

    def create_database(self, name: str) -> str:
        """A new, empty database; its URL."""
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, ending any connection still open to it (an engine's pool)."""
        self.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))  # fmt: skip
        self.execute(f'DROP DATABASE IF EXISTS "{name}"')


def _as_user(user: str) -> list[str]:
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--"]
    entry = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]


@contextlib.contextmanager
def running_server(bindir: Path) -> Iterator[PostgresServer]:
    """A started server with the database `kneepoint`; stopped and its folder removed on
    the way out, whatever raised inside."""
    user = _unprivileged_user()
    # Under the system's temporary folder: a root-only parent (pytest's own, under
    # /tmp/pytest-of-root) would keep an unprivileged server out of its data.
    folder = Path(tempfile.mkdtemp(prefix="kneepoint-pg-"))
    server = PostgresServer(bindir, folder, user)
    watchdog = None
    try:
        server.init()
        watchdog = server.watchdog()
        server.start()
        server.execute(f'CREATE DATABASE "{DATABASE}"')
        yield server
    finally:
        if watchdog is not None:
            os.killpg(watchdog.pid, signal.SIGKILL)  # its shell and its sleep
            watchdog.wait()
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def require_bindir() -> Path:
    """The binaries' folder; skipped without them, failed in CI (`CI=true`)."""
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must have PostgreSQL (.ci/run installs it): {MISSING}")
        pytest.skip(MISSING)
    return bindir


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (skipped where it is not installed, failed in CI)."""
    with running_server(require_bindir()) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """SQLAlchemy URL of the session server's database `kneepoint`, shared by the session:
    `postgresql+psycopg://kneepoint@127.0.0.1:PORT/kneepoint`."""
    return postgres_server.url()


@pytest.fixture
def postgres_db(postgres_server: PostgresServer) -> Iterator[str]:
    """URL of a new database of this test's own on the session server, dropped after it."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    url = postgres_server.create_database(name)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)
