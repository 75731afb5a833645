"""Whole tunes on a real Ray cluster of this machine (``ray.cluster_utils.Cluster``: a head and
two nodes of 4 logical GPUs each, every process on 127.0.0.1), on the simulator: servers of
2 GPUs side by side on GPUs Ray gave them, a node removed mid-validation, a driver killed and
resumed, Ctrl-C. The tier is ``pytest -m ray``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

# Every node, the GCS and the drivers on loopback: Ray otherwise swaps 127.0.0.1 for this
# machine's address when a driver joins (services.resolve_ip_for_localhost).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
if os.environ.get("CI") == "true":  # in CI the tier must run, never skip
    import ray
else:
    ray = pytest.importorskip("ray", reason="the ray tier needs Ray: pip install -e '.[ray]'")

from ray.cluster_utils import Cluster

from kneepoint.config import knob_catalogue, load_study
from kneepoint.measure import LogProgress
from kneepoint.probes.cluster import RayPool
from kneepoint.records import EXIT_INTERRUPTED, Event, Landed, Placed, StudySpec
from kneepoint.run import RunFolder, RunState
from kneepoint.tune import PoolTuner

pytestmark = pytest.mark.ray
REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "tests" / "fixtures" / "studies" / "small-tune.yaml"
TP2 = REPO / "configs" / "studies" / "llama70b-4gpu.yaml"
TP2_SETS = [
    "search.knobs=[max_num_seqs,gpu_memory_utilization]",  # every server 2 GPUs wide
    "tuning.validate_repeats=4",  # the baseline's 4 repeats side by side: 4 servers at once
    "budget.max_trials=3",
]
LOOPBACK = {"node_ip_address": "127.0.0.1"}
NOW = datetime(2026, 12, 7, 3, 0).astimezone()
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head without GPUs (so that removing a GPU node leaves the cluster up) and two nodes
    of 4 GPUs."""
    head = {**LOOPBACK, "num_cpus": 2, "include_dashboard": False, "resources": {"head": 1}}
    made = Cluster(initialize_head=True, head_node_args=head)
    for _ in range(2):
        made.add_node(num_cpus=4, num_gpus=4, **LOOPBACK)
    made.wait_for_nodes()
    ray.init(address=made.address, log_to_driver=False)
    yield made
    ray.shutdown()
    made.shutdown()


def _gpu_nodes(cluster: Cluster) -> int:
    return sum(1 for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0)


@pytest.fixture
def whole(cluster: Cluster) -> Cluster:
    """The cluster with both GPU nodes (a test before may have removed one)."""
    while _gpu_nodes(cluster) < 2:
        cluster.add_node(num_cpus=4, num_gpus=4, **LOOPBACK)
        cluster.wait_for_nodes()
    return cluster


@dataclass
class Watched(RayPool):
    """Ray's pool, noting where and when each step ran."""

    landed: list[Landed] = field(default_factory=list)
    wrap: Callable[[str, Any], Any] | None = None

    def __post_init__(self) -> None:
        RayPool.__init__(self)

    def submit(self, key: str, job: Any, gpus: int) -> None:
        super().submit(key, self.wrap(key, job) if self.wrap else job, gpus)

    def wait(self) -> Landed:
        landed = super().wait()
        self.landed.append(landed)
        return landed

    def overlapping(self) -> list[list[Landed]]:
        """For each step, the steps running while it started (itself included)."""
        ran = [x for x in self.landed if x.ran_s is not None]
        return [
            [y for y in ran if y.ran_s[0] <= x.ran_s[0] < y.ran_s[1]]  # type: ignore[index]
            for x in ran
        ]


def _tune(study: StudySpec, tmp: Path, pool: RayPool) -> tuple[RunState, list[Event]]:
    folder = RunFolder.create(tmp, study, NOW)
    state = PoolTuner(folder, study, LogProgress(), knob_catalogue(), pool).run()
    return state, list(folder.ledger.recover())


@ray.remote(num_cpus=0, resources={"head": 0.01})
class Meeting:
    """Holds each step that arrives until ``size`` of them wait at once (or ``timeout_s``
    passes), noting the node and GPUs of each: steps the pool runs side by side all meet."""

    def __init__(self, size: int, timeout_s: float) -> None:
        self.size, self.timeout_s = size, timeout_s
        self.waiting, self.most_at_once = 0, 0
        self.gpus: list[tuple[str, str]] = []
        self.full = asyncio.Event()

    async def wait(self, key: str, node: str, gpu_ids: Sequence[str]) -> None:
        self.gpus.extend((node, gpu) for gpu in gpu_ids)
        self.waiting += 1
        self.most_at_once = max(self.most_at_once, self.waiting)
        if self.waiting == self.size:
            self.full.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.full.wait(), self.timeout_s)
        self.waiting -= 1

    def met(self) -> tuple[int, list[tuple[str, str]]]:
        return self.most_at_once, self.gpus


@dataclass(frozen=True)
class Waits:
    """A step whose key holds ``steps`` that first waits at ``actor`` (its ``wait(key, node,
    gpu_ids)``), then measures."""

    job: Any
    key: str
    steps: str
    actor: Any

    def __call__(self, gpu_ids: Sequence[str]) -> list[Event]:
        if self.steps in self.key:
            node = ray.get_runtime_context().get_node_id()
            ray.get(self.actor.wait.remote(self.key, node, list(gpu_ids)))
        result: list[Event] = self.job(gpu_ids)
        return result


def test_a_tp2_study_runs_four_servers_at_once_each_on_two_gpus_of_its_own(
    whole: Cluster, tmp_path: Path
) -> None:
    meeting = Meeting.remote(4, timeout_s=60.0)  # type: ignore[attr-defined]
    pool = Watched(wrap=lambda key, job: Waits(job, key, "repeats-r", meeting))
    state, _ = _tune(load_study(TP2, TP2_SETS), tmp_path, pool)
    assert state.finished is not None
    at_once, gpus = ray.get(meeting.met.remote())
    assert at_once == 4, f"the baseline's 4 repeats did not run at once: {gpus}"
    assert len(gpus) == len(set(gpus)) == 8, f"servers side by side shared a GPU: {gpus}"
    for steps in pool.overlapping():
        held = [(x.node, gpu) for x in steps for gpu in x.gpu_ids]
        assert len(held) == len(set(held)), f"servers side by side shared a GPU: {steps}"
    assert all(len(x.gpu_ids) == 2 for x in pool.landed)


@ray.remote(num_cpus=0, resources={"head": 0.01})
class Gate:
    """Holds the first validation step until let go, and says where it started."""

    def __init__(self) -> None:
        self.started: asyncio.Future[tuple[str, str]] = asyncio.get_event_loop().create_future()
        self.open = asyncio.Event()

    async def wait(self, key: str, node: str, gpu_ids: Sequence[str]) -> None:
        if self.started.done():
            return
        self.started.set_result((key, node))
        await self.open.wait()

    async def first(self) -> tuple[str, str]:
        return await self.started

    def release(self) -> None:
        self.open.set()


def test_a_node_removed_mid_validation_is_survived_with_the_same_winner(
    whole: Cluster, tmp_path: Path
) -> None:
    study = load_study(SMALL)
    undisturbed, _ = _tune(study, tmp_path / "undisturbed", RayPool())
    gate = Gate.remote()  # type: ignore[attr-defined]
    pool = Watched(wrap=lambda key, job: Waits(job, key, "-validate-", gate))
    outcome: dict[str, Any] = {}
    driver = threading.Thread(target=lambda: outcome.update(run=_tune(study, tmp_path / "d", pool)))
    driver.start()
    key, node_id = ray.get(gate.first.remote())
    (node,) = [n for n in whole.worker_nodes if n.node_id == node_id]
    whole.remove_node(node)
    gate.release.remote()
    driver.join()
    state, events = outcome["run"]
    lost = [e for e in events if isinstance(e, Placed) and e.lost is not None and e.step == key]
    assert lost and lost[0].device_s > 0, "the lost attempt is in the ledger with its time"
    again = [e for e in events if isinstance(e, Placed) and e.step == key and e.lost is None]
    assert [e.attempt for e in again] == [2]
    assert state.incumbent == undisturbed.incumbent
    assert state.device_s == pytest.approx(sum(getattr(e, "device_s", 0.0) for e in events))


def _kneepoint(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = [sys.executable, "-m", "kneepoint.cli.main", "tune", *args]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _when_ledger_has(runs: Path, event: str, process: subprocess.Popen[str]) -> Path:
    """The run folder, once its ledger holds ``event`` (the driver still running)."""
    while process.poll() is None:
        for ledger in runs.glob("*/ledger.jsonl"):
            if f'"event":"{event}"' in ledger.read_text():
                return ledger.parent
        threading.Event().wait(0.05)
    raise AssertionError(f"the driver ended before its ledger had {event}: {process.stderr}")


def test_a_driver_killed_mid_run_resumes_without_measuring_a_step_twice(
    whole: Cluster, tmp_path: Path
) -> None:
    driver = _kneepoint(str(SMALL), "--ray", whole.address, "--runs-dir", str(tmp_path))
    folder = _when_ledger_has(tmp_path, "proposed", driver)
    driver.kill()
    driver.wait()
    resumed = _kneepoint(str(folder))
    _, err = resumed.communicate()
    assert resumed.returncode == 0, err
    events = list(RunFolder(folder).ledger.recover())
    state = RunState.replay(events)
    assert state.finished is not None and state.burst is not None
    kept = [e.step for e in events if isinstance(e, Placed) and e.lost is None]
    assert len(kept) == len(set(kept)), "a step landed twice"


def test_ctrl_c_cancels_every_step_and_frees_the_gpus(whole: Cluster, tmp_path: Path) -> None:
    driver = _kneepoint(str(SMALL), "--ray", whole.address, "--runs-dir", str(tmp_path))
    _when_ledger_has(tmp_path, "proposed", driver)
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate()
    assert driver.returncode == EXIT_INTERRUPTED, err
    assert "resume with: kneepoint tune" in err
    groups = ray.util.placement_group_table().values()
    assert all(g["state"] == "REMOVED" for g in groups)


@dataclass(frozen=True)
class NotesPriority:
    """A step that writes its worker's niceness to ``path`` and measures nothing."""

    path: Path

    def __call__(self, gpu_ids: Sequence[str]) -> list[Event]:
        self.path.write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
        return []


def test_a_step_runs_at_the_drivers_priority_not_rays_worker_niceness(
    whole: Cluster, tmp_path: Path
) -> None:
    pool, noted = RayPool(), tmp_path / "nice"
    pool.submit("step", NotesPriority(noted), 1)
    assert pool.wait().lost is None
    assert int(noted.read_text()) == os.getpriority(os.PRIO_PROCESS, 0)
