"""The host is a reading: a point over which other work held the host's CPUs (Linux PSI, and
the CPU spent outside the measurement) is unknown and taken again, not read as a slow server;
one whose pressure came from the measurement's own tasks is counted."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from kneepoint.config import knob_catalogue, load_study
from kneepoint.load.point import load_point
from kneepoint.load.trust import Trust
from kneepoint.probes.server.server_failure import bound_cores
from kneepoint.probes.telemetry import cpu
from kneepoint.probes.telemetry.cpu import HostLoad, listener
from kneepoint.records.loadpoint import Signals
from kneepoint.records.measure import RequestRecord
from kneepoint.records.measurement import MeasurementSpec
from kneepoint.records.slo import ClassSlo, Slo
from kneepoint.records.sweep import SweepPoint, SweepResult
from kneepoint.report.diagnosis_document import capacity_words
from kneepoint.tune.diagnose import recorded

from .conftest import QUICKSTART

SLO = Slo(default=ClassSlo(ttft_p99_ms=1000))


def _psi(path: Path, stalled_us: int) -> None:
    path.write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={stalled_us}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )


def test_the_pressure_is_the_stalled_share_of_the_wall_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    psi, now = tmp_path / "cpu", [100.0]
    monkeypatch.setattr(cpu.time, "perf_counter", lambda: now[0])
    _psi(psi, 5_000_000)
    host = HostLoad(psi=psi)
    _psi(psi, 9_100_000)  # 4.1 s of some task waiting over 10 s
    now[0] += 10.0
    assert host.reading().pressure == pytest.approx(0.41)
    assert HostLoad(psi=tmp_path / "absent").reading().pressure is None


@contextmanager
def _spinning() -> Iterator[psutil.Process]:
    """A CPU-bound process in a session of its own, as another login's would be."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield psutil.Process(hog.pid)
    finally:
        hog.kill()
        hog.wait()


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def test_others_cores_count_another_process_but_not_the_servers_tree() -> None:
    """Two readings over the same span, one told the spinning process is the server: they
    differ by what it used, which the other reading counts as others'."""
    with _spinning() as hog:
        began = time.perf_counter()
        as_server, as_other = HostLoad(server_pid=hog.pid), HostLoad()
        start = _cpu_s(hog)
        while _cpu_s(hog) - start < 0.3:  # waits on the hog's own CPU, not on a clock
            psutil.cpu_percent(interval=0.05)
        server_read, other_read = as_server.reading(), as_other.reading()
        used, wall = _cpu_s(hog) - start, time.perf_counter() - began
    assert server_read.others_cores is not None and other_read.others_cores is not None
    gap_s = (other_read.others_cores - server_read.others_cores) * wall
    assert 0.8 * used <= gap_s <= 1.2 * used + 0.05, (gap_s, used)
    assert server_read.engine_pct is not None and other_read.engine_pct is None
    engine_s = server_read.engine_pct / 100.0 * wall  # the same reading gives the engine's CPU
    assert 0.8 * used <= engine_s <= 1.2 * used + 0.05, (engine_s, used)
    assert other_read.others_cores >= server_read.others_cores >= 0.0
    # The spinning process held about a core of those this process may run on.
    cores = len(psutil.Process().cpu_affinity() or [0])
    assert server_read.idle_cores is not None and server_read.idle_cores <= cores - 0.5


def test_a_local_url_finds_the_process_listening_on_its_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert listener(f"http://127.0.0.1:{port}") == psutil.Process().pid
    assert listener(f"http://gpu-box.example:{port}") is None
    assert listener(None) is None


def _records() -> list[RequestRecord]:
    return [
        RequestRecord(index=i, traffic_class="c", scheduled_s=i * 0.1, sent_s=i * 0.1,
                      chunk_times_s=(i * 0.1 + 0.05, i * 0.1 + 0.08), end_s=i * 0.1 + 0.08,
                      prompt_tokens=8, output_tokens=2)
        for i in range(100)
    ]  # fmt: skip


def test_a_point_on_a_busy_host_is_not_counted() -> None:
    held = Signals(host_cpu_pressure=0.41, host_cpu_others_cores=0.93)
    busy = load_point(10.0, _records(), SLO, signals=held)
    assert busy.host_busy and not busy.valid
    assert busy.invalid_reason() == (
        "the host is busy: CPU pressure 41%, 0.9 cores used by other work over the point; "
        "not counted"
    )
    unread = load_point(10.0, _records(), SLO, signals=Signals(host_cpu_pressure=0.41))
    assert unread.host_busy  # without others' CPU the pressure alone decides
    quiet = load_point(10.0, _records(), SLO, signals=Signals(host_cpu_pressure=0.02))
    assert not quiet.host_busy and quiet.valid
    lenient = Trust.of(SLO, MeasurementSpec(max_host_cpu_pressure=0.5))
    assert load_point(10.0, _records(), SLO, signals=Signals(host_cpu_pressure=0.41),
                      trust=lenient).valid  # fmt: skip


def test_pressure_from_the_measurements_own_tasks_is_counted() -> None:
    """The server, its API front and the client queued on one core: pressure without others'
    CPU is how the deployment runs, not a busy host."""
    queued = Signals(host_cpu_pressure=0.36, host_cpu_others_cores=0.02)
    own = load_point(10.0, _records(), SLO, signals=queued)
    assert not own.host_busy and own.valid


def test_the_engines_share_of_the_cores_it_bound_is_said() -> None:
    """vLLM's CPU build logs the cores it bound its OpenMP threads to; a busy point says what
    the engine got of them (its threads stall where other work runs on their cores)."""
    log = (
        "(EngineCore pid=19860) INFO 11-28 02:53:03 [ompmultiprocessing.py:185] "
        "\tlocal_rank=0, core ids=[0]\n"
        "(EngineCore pid=19860) INFO 11-28 02:53:03 [ompmultiprocessing.py:185] "
        "\treserved_cpus=[1]\n"
    )  # from a real server's log on the 2-core AMD host (2026-11-28)
    assert bound_cores(log) == 1
    assert bound_cores(log.replace("[0]", "[0, 1, 2, 3]")) == 4
    assert bound_cores("INFO GPU KV cache size: 8,192 tokens") is None
    held = Signals(host_cpu_pressure=0.62, host_cpu_others_cores=1.1, engine_cpu_pct=45.0,
                   engine_cores_bound=1)  # fmt: skip
    point = load_point(10.0, _records(), SLO, signals=held)
    assert point.invalid_reason() == (
        "the host is busy: CPU pressure 62%, 1.1 cores used by other work, the engine 45% of "
        "the 1 it bound over the point; not counted"
    )


_TREE = """
import ctypes, os, sys, time
def spin_or_sleep(spins):
    while True:
        if not spins:
            time.sleep(1)
for name in sys.argv[2:]:
    if os.fork() == 0:
        # vLLM's set_process_title also sets the kernel's comm (prctl PR_SET_NAME), which
        # is what psutil's name() reads.
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
        os.write(1, b"ready\\n")  # one write: the processes share the pipe
        spin_or_sleep(name.startswith("VLLM::APIServer"))
os.write(1, b"ready\\n")
spin_or_sleep(sys.argv[1] == "spin")
"""


@contextmanager
def _titled_tree(root: str, *children: str) -> Iterator[psutil.Process]:
    """A process tree titled as a vLLM V1 server's: its root spinning (``root="spin"``) or
    not, and children named as vLLM names them, of which the API servers spin."""
    argv = [sys.executable, "-c", _TREE, root, *children]
    tree = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert tree.stdout is not None
        for _ in range(len(children) + 1):
            assert tree.stdout.readline().strip() == "ready"
        yield psutil.Process(tree.pid)
    finally:
        for proc in cpu.tree(psutil.Process(tree.pid))[::-1]:
            proc.kill()
        tree.wait()


def _frontend_read(server: psutil.Process, *busy: psutil.Process) -> tuple[float | None, float]:
    """The front-end reading of a server's tree, and the busiest of the busy processes' CPU
    over it: which of several spinning API servers the scheduler favoured is not the test's
    to choose (on a loaded 2-core host APIServer_1 got 97% of a core to APIServer_0's 75%)."""
    host = HostLoad(server_pid=server.pid)
    began, starts = time.perf_counter(), [_cpu_s(proc) for proc in busy]

    def most() -> float:
        return max(_cpu_s(p) - s for p, s in zip(busy, starts, strict=True))

    while most() < 0.3:  # waits on the processes' own CPU, not on a clock
        psutil.cpu_percent(interval=0.05)
    read = host.reading()
    used = most()
    return read.frontend_pct, 100.0 * used / (time.perf_counter() - began)


def test_one_api_server_is_the_root_beside_its_engine_core() -> None:
    with _titled_tree("spin", "VLLM::EngineCore", "VLLM::Worker") as server:
        assert cpu.api_servers(cpu.tree(server)) == (server.pid,)
        frontend, used = _frontend_read(server, server)
    assert frontend is not None and 0.8 * used <= frontend <= 1.2 * used + 5, (frontend, used)


def test_several_api_servers_read_as_the_busiest() -> None:
    titles = ("VLLM::EngineCore", "VLLM::APIServer_0", "VLLM::APIServer_1")
    with _titled_tree("idle", *titles) as server:
        servers = cpu.api_servers(cpu.tree(server))
        assert len(servers) == 2 and server.pid not in servers
        busy = [psutil.Process(pid) for pid in servers]
        frontend, used = _frontend_read(server, *busy)
    assert frontend is not None and 0.8 * used <= frontend <= 1.2 * used + 5, (frontend, used)


def test_a_tree_without_an_engine_core_has_no_front_end_to_tell_apart() -> None:
    with _titled_tree("idle") as server:
        assert cpu.api_servers(cpu.tree(server)) == ()
        assert HostLoad(server_pid=server.pid).reading().frontend_pct is None


def test_a_sweep_whose_every_point_the_host_held_names_no_constraint() -> None:
    """diagnose --url on a busy host: all four points not counted, yet the verdict read
    "underloaded" at 36 req/s and the header "no rate tried met the SLO" (2026-12-03)."""
    held = Signals(host_cpu_pressure=0.99, host_cpu_others_cores=1.6)
    study = load_study(QUICKSTART)
    points = tuple(
        SweepPoint(rate_rps=rate, margin=0.5, point=load_point(rate, _records(), SLO, signals=held))
        for rate in (18.0, 36.0)
    )
    result = SweepResult(kind="knee", config=study.engine, points=points, capacity_rps=None)
    findings = recorded(study, result, knob_catalogue())
    assert findings.diagnosis.binding == "host_busy"
    assert "measure again with nothing else running" in findings.diagnosis.headline()
    assert capacity_words(result).startswith("no point could be counted (the host is busy: ")
