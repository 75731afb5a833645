"""CPU over a load point: what the engine used, and whether other work held the host.

A busy host looks like a slow server: a CPU-bound process (even at nice 19, in another
session's autogroup) stalls the OpenMP threads of vLLM's CPU build, and the points measured
beside it read a server many times slower than it is. Two readings together say that something
*else* held the CPUs, and neither does alone:

- **Pressure** (Linux's pressure stall information, ``/proc/pressure/cpu`` "some"): the share
  of wall time in which some runnable task waited for a CPU. It cannot say whose tasks waited.
  On a 2-core host vLLM's CPU build pins its worker to one core, and its API server, the load
  generator and the caller share the other, so the measurement's own tasks queue behind each
  other: a real-tier point at 6.7 req/s, past that host's capacity, read 0.36 on a CI machine.
- **Others' CPU**: the host's busy time (a VM's steal included: its neighbours held the
  cores) less what the measuring process and the server's process tree used, in cores.

A point whose pressure is high but whose CPU went to the measurement itself measured the
deployment as it runs (a GPU host's API server and engine share its CPUs too); one where
others held the cores measured the host.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

PSI_CPU = Path("/proc/pressure/cpu")
ENGINE_CORE_TITLE = "VLLM::EngineCor"  # "VLLM::EngineCore" cut to comm's 15 characters
API_SERVER_TITLE = "VLLM::APIServer"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def tree(root: psutil.Process) -> list[psutil.Process]:
    """A process and its descendants (only the root where the children cannot be listed)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return [root]


def cpu_seconds(procs: Iterable[psutil.Process]) -> dict[int, float]:
    """User plus system CPU seconds of each process still alive, by pid."""
    used: dict[int, float] = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            used[proc.pid] = times.user + times.system
    return used


@dataclass(frozen=True, slots=True)
class HostReading:
    pressure: float | None
    """Share of the wall time some runnable task waited for a CPU; None without PSI."""
    others_cores: float | None
    """Cores' worth of CPU the host spent outside the measurement; None where unread."""
    engine_pct: float | None = None
    """CPU the launched server's process tree used (100 = one core); None where the server
    was not launched here."""
    frontend_pct: float | None = None
    """CPU of the launched server's busiest API-server process (100 = one core); None where
    the tree has no engine-core process of its own to tell it from (not vLLM V1)."""
    idle_cores: float | None = None
    """Cores' worth of the CPUs this process may run on (its affinity, which the server it
    launches inherits) that nobody used over the window; None where unread."""


class HostLoad:
    """The host between two readings: its CPU pressure and what others used of it.

    ``server_pid``: the server's process (its tree is the measurement's own); where None and
    the URL is this host's, the process listening on its port."""

    def __init__(
        self, server_pid: int | None = None, url: str | None = None, psi: Path = PSI_CPU
    ) -> None:
        self._psi = psi
        own = [psutil.Process(os.getpid())]
        server = server_pid if server_pid is not None else listener(url)
        engine: list[psutil.Process] = []
        if server is not None:
            with contextlib.suppress(psutil.Error):
                engine = tree(psutil.Process(server))
        self._engine = frozenset(p.pid for p in engine) if server_pid is not None else None
        self._frontends = api_servers(engine) if server_pid is not None else ()
        self._own = {p.pid: p for p in [*own, *engine]}.values()
        self.own_pids = frozenset(p.pid for p in self._own)
        """The measurement's processes: this one and the server's tree."""
        self._stalled, self._busy = _stalled_us(psi), _host_busy_s()
        self._idle = _idle_s()
        self._used = cpu_seconds(self._own)
        self._wall = time.perf_counter()

    def reading(self) -> HostReading:
        """Pressure, others' cores and the launched server's CPU since construction."""
        stalled, busy = _stalled_us(self._psi), _host_busy_s()
        used, wall = cpu_seconds(self._own), time.perf_counter()
        span = wall - self._wall
        if span <= 0:
            return HostReading(None, None)
        pressure = None
        if stalled is not None and self._stalled is not None:
            pressure = min(1.0, max(0.0, (stalled - self._stalled) / 1e6 / span))
        # A process that ended inside the window counts what it used up to the start only:
        # the rest is read as others', which errs towards measuring again.
        own = sum(used.get(pid, start) - start for pid, start in self._used.items())
        others = max(0.0, (busy - self._busy - own) / span) if self._used else None
        idle = max(0.0, (_idle_s() - self._idle) / span)
        return HostReading(
            pressure,
            others,
            self._pct(used, span, self._engine or ()),
            self._frontend_pct(used, span),
            idle,
        )

    def _pct(self, used: dict[int, float], span: float, pids: Iterable[int]) -> float | None:
        start = {pid: self._used[pid] for pid in pids if pid in self._used}
        if not start:
            return None
        spent = sum(used.get(pid, then) - then for pid, then in start.items())
        return max(0.0, spent / span * 100.0)

    def _frontend_pct(self, used: dict[int, float], span: float) -> float | None:
        found = [self._pct(used, span, (pid,)) for pid in self._frontends]
        return max((pct for pct in found if pct is not None), default=None)


def api_servers(server_tree: list[psutil.Process]) -> tuple[int, ...]:
    """The API-server processes of a vLLM V1 server's tree (root first): those vLLM titles
    ``VLLM::APIServer_N`` where ``--api-server-count`` started several, else the root itself,
    which serves HTTP while its engine core runs in a child titled ``VLLM::EngineCore``.
    Empty where no process is titled as an engine core: one process does both (the
    simulator's HTTP server), or the server is not vLLM V1, and no reading can tell them
    apart. The titles are vLLM's ``set_process_title`` (``vllm/utils/system_utils.py``), which
    also sets the kernel's 15-character ``comm``."""
    names: dict[int, str] = {}
    for proc in server_tree:
        with contextlib.suppress(psutil.Error):
            names[proc.pid] = proc.name()
    if not any(name.startswith(ENGINE_CORE_TITLE) for name in names.values()):
        return ()
    titled = tuple(pid for pid, name in names.items() if name.startswith(API_SERVER_TITLE))
    return titled or (server_tree[0].pid,)


def _stalled_us(path: Path) -> float | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            total = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f).get("total")
            return float(total) if total is not None else None
    return None


def _idle_s() -> float:
    """CPU seconds the cores this process may run on spent idle, since boot."""
    try:
        cores = psutil.Process().cpu_affinity() or []
    except (AttributeError, psutil.Error):  # no affinity on this platform: every core
        cores = []
    per_core = psutil.cpu_times(percpu=True)
    chosen = [per_core[i] for i in cores if i < len(per_core)] or per_core
    return sum(t.idle + getattr(t, "iowait", 0.0) for t in chosen)


def _host_busy_s() -> float:
    """CPU seconds the host's cores spent on anything but idling, since boot."""
    times = psutil.cpu_times()
    return sum(
        getattr(times, field, 0.0)
        for field in ("user", "nice", "system", "irq", "softirq", "steal")
    )


def listener(url: str | None) -> int | None:
    """The pid listening on a URL's port where the URL is this host's (None where it is
    another host's, or the process cannot be seen)."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.hostname not in LOCAL_HOSTS or parts.port is None:
        return None
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == parts.port:
            return conn.pid
    return None
