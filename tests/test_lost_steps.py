"""Steps lost with their node, on the virtual clock's pool: one lost fewer than ``ATTEMPTS``
times is run again and counted; one lost every time becomes its step's failure in the ledger
(a trial crashed, the baseline failed), and the run goes on or stops as a failure there would
make it, never with a traceback."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kneepoint.config import knob_catalogue, load_study
from kneepoint.measure import LogProgress
from kneepoint.records import Event, Landed, Placed, Screened
from kneepoint.report import write_report
from kneepoint.run import RunFolder, RunState
from kneepoint.tune import PoolTuner, VirtualPool
from kneepoint.tune.pool_loop import ATTEMPTS

REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "tests" / "fixtures" / "studies" / "small-tune.yaml"
NOW = datetime(2026, 12, 7, 3, 0).astimezone()
Job = Callable[[Sequence[str]], list[Event]]


@dataclass
class Losing:
    """The virtual pool, but every attempt at a step whose key is in ``doomed`` lands lost
    (its node died) for ``times`` attempts, after holding its GPUs for 60 s."""

    pool: VirtualPool
    doomed: set[str]
    times: int = ATTEMPTS
    lost: list[str] = field(default_factory=list)
    _pending: list[str] = field(default_factory=list)

    def free(self) -> int:
        return self.pool.free()

    def submit(self, key: str, job: Job, gpus: int) -> None:
        if key in self.doomed and self.lost.count(key) < self.times:
            self._pending.append(key)
            return
        self.pool.submit(key, job, gpus)

    def wait(self) -> Landed:
        if self._pending:
            key = self._pending.pop(0)
            self.lost.append(key)
            return Landed(key=key, node="node-0", lost="NodeDiedError: node-0", held_s=60.0)
        return self.pool.wait()

    def cancel(self) -> None:
        self._pending.clear()
        self.pool.cancel()


def _run(tmp_path: Path, pool: Losing) -> list[Event]:
    return list(_folder(tmp_path, pool).ledger.recover())


def _folder(tmp_path: Path, pool: Losing) -> RunFolder:
    study = load_study(SMALL)
    folder = RunFolder.create(tmp_path, study, NOW)
    PoolTuner(folder, study, LogProgress(), knob_catalogue(), pool).run()
    return folder


def test_a_step_lost_once_is_run_again_and_its_attempt_counted(tmp_path: Path) -> None:
    events = _run(tmp_path, Losing(VirtualPool(4), {"trial-1-screen"}, times=1))
    placed = [e for e in events if isinstance(e, Placed) and e.step == "trial-1-screen"]
    assert [(e.attempt, e.lost is None) for e in placed] == [(1, False), (2, True)]
    assert placed[0].device_s == 60.0
    screened = next(e for e in events if isinstance(e, Screened) and e.trial == 1)
    assert screened.outcome.status != "crashed"


def test_a_screen_lost_every_time_crashes_its_trial_and_the_run_goes_on(tmp_path: Path) -> None:
    events = _run(tmp_path, Losing(VirtualPool(4), {"trial-1-screen"}))
    placed = [e for e in events if isinstance(e, Placed) and e.step == "trial-1-screen"]
    assert [e.attempt for e in placed] == list(range(1, ATTEMPTS + 1))
    assert all(e.lost for e in placed)
    screened = next(e for e in events if isinstance(e, Screened) and e.trial == 1)
    assert screened.outcome.status == "crashed"
    assert f"lost with its node {ATTEMPTS} times" in screened.outcome.detail
    state = RunState.replay(events)
    assert state.finished is not None and state.finished.reason != "baseline_failed"
    assert state.device_s >= ATTEMPTS * 60.0


def test_the_report_names_each_lost_attempt_and_its_device_time(tmp_path: Path) -> None:
    folder = _folder(tmp_path, Losing(VirtualPool(4), {"trial-1-screen"}, times=2))
    markdown, _ = write_report(RunFolder.existing(folder.path))
    text = markdown.read_text()
    assert "## Where it ran" in text
    assert "2 attempt(s) measured nothing; their 0.03 device-hours" in text
    assert "trial-1-screen (attempt 2, node-0): NodeDiedError: node-0" in text


def test_a_baseline_lost_every_time_fails_the_run(tmp_path: Path) -> None:
    events = _run(tmp_path, Losing(VirtualPool(4), {"knee"}))
    state = RunState.replay(events)
    assert state.finished is not None and state.finished.reason == "baseline_failed"
    assert "lost with its node" in state.finished.detail
    assert state.burst is None
