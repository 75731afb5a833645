"""A run over several GPU sets (``kneepoint.tune.dispatch`` and its driver), on the virtual
clock's pool: what it dispatches, what it writes, and that its ledger is a run's ledger."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from kneepoint.config import knob_catalogue, load_study
from kneepoint.measure import LogProgress
from kneepoint.records import (
    MeasureRepeats,
    Outcome,
    PartMeasured,
    Placed,
    Promoted,
    Proposed,
    Screen,
    Screened,
    SearchKnee,
    StudySpec,
    Validate,
    inherited_env,
)
from kneepoint.run import RunFolder, RunState
from kneepoint.tune import PoolTuner, VirtualPool
from kneepoint.tune.dispatch import Pooled, dispatch

REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "tests" / "fixtures" / "studies" / "small-tune.yaml"
NOW = datetime(2026, 12, 7, 3, 0).astimezone()


def _run(
    tmp_path: Path, gpus: int, study: StudySpec | None = None
) -> tuple[RunFolder, VirtualPool]:
    study = study or load_study(SMALL)
    folder = RunFolder.create(tmp_path, study, NOW)
    pool = VirtualPool(gpus)
    PoolTuner(folder, study, LogProgress(), knob_catalogue(), pool).run()
    return folder, pool


def test_a_pooled_run_finishes_and_its_ledger_replays(tmp_path: Path) -> None:
    folder, pool = _run(tmp_path, 4)
    events = list(folder.ledger.recover())
    state = RunState.replay(events)
    assert state.finished is not None and state.burst is not None
    assert state.promotions, "small-tune promotes within its four trials"
    kept = Counter(e.step for e in events if isinstance(e, Placed) and e.lost is None)
    assert max(kept.values()) == 1, "no step is measured twice"
    assert len(pool.landings) == sum(isinstance(e, Placed) for e in events)
    assert (folder.path / "best.yaml").exists()


def test_the_baseline_repeats_run_side_by_side_after_the_knee_search(tmp_path: Path) -> None:
    _, pool = _run(tmp_path, 4)
    starts = {key: start for key, start, _ in pool.landings}
    knee_end = next(end for key, _, end in pool.landings if key == "knee")
    repeats = [k for k in starts if k.startswith("repeats-")]
    assert len(repeats) == load_study(SMALL).tuning.validate_repeats
    assert {starts[k] for k in repeats} == {knee_end}


def test_a_screen_that_lands_after_a_promotion_beside_it_is_superseded(tmp_path: Path) -> None:
    folder, _ = _run(tmp_path, 4)
    events = list(folder.ledger.recover())
    promoted = next(i for i, e in enumerate(events) if isinstance(e, Promoted))
    before = RunState.replay(events[:promoted])
    proposal = next(e for e in events if isinstance(e, Proposed)).proposal
    late = before.next_trial_number()
    ledger = [
        *events[:promoted],
        Proposed(trial=late, proposal=proposal),
        events[promoted],
        Screened(trial=late, outcome=Outcome(status="ok", objective=99.0), finalist=True,
                 reason="screened +90%: validate it"),
    ]  # fmt: skip
    trial = RunState.replay(ledger).trials[late]
    assert trial.screened is not None and not trial.screened.finalist
    assert trial.screened.reason.startswith("superseded: screened +90%")
    assert trial.next_step() is None


def test_the_first_dispatch_starts_and_the_baseline_searches_its_knee_alone() -> None:
    study = load_study(SMALL)
    assert type(dispatch(RunState(), study, NOW, Pooled(free=8))[0]).__name__ == "Start"


def test_a_run_on_a_pool_matches_the_state_its_shares_make(tmp_path: Path) -> None:
    """Every share of a validation the ledger holds is of a trial the ledger then judged (or
    is kept as device time only, its trial judged before it landed)."""
    folder, _ = _run(tmp_path, 8)
    events = list(folder.ledger.recover())
    state = RunState.replay(events)
    for event in events:
        if isinstance(event, PartMeasured) and event.validation is not None:
            assert state.trials[event.validation.trial].validated is not None
    spent = sum(getattr(e, "device_s", 0.0) for e in events)
    assert spent == pytest.approx(state.device_s)


def test_dispatch_gives_each_free_slot_one_repeat_then_waits(tmp_path: Path) -> None:
    folder, _ = _run(tmp_path, 2)
    events = list(folder.ledger.recover())
    study = load_study(SMALL)
    knee_at = next(
        i for i, e in enumerate(events) if isinstance(e, PartMeasured) and e.baseline is not None
    )
    state = RunState.replay(events[: knee_at + 1])
    first = dispatch(state, study, NOW, Pooled(free=1))
    assert first == [MeasureRepeats(repeats=(0, 1))]
    assert dispatch(state, study, NOW, Pooled(out=(MeasureRepeats(repeats=(0, 1)),), free=0)) == []
    before = RunState.replay(events[:1])
    assert dispatch(before, study, NOW, Pooled(free=3)) == [SearchKnee()]
    out = (SearchKnee(),)
    assert dispatch(before, study, NOW, Pooled(out=out, free=3)) == []


def test_a_validation_waits_for_its_phase_before_it_is_judged(tmp_path: Path) -> None:
    folder, _ = _run(tmp_path, 8)
    events = list(folder.ledger.recover())
    study = load_study(SMALL)
    share = next(
        i for i, e in enumerate(events) if isinstance(e, PartMeasured) and e.validation is not None
    )
    state = RunState.replay(events[: share + 1])
    part = events[share]
    assert isinstance(part, PartMeasured) and part.validation is not None
    n = part.validation.trial
    others = [r for r in range(study.tuning.validate_repeats) if r != part.validation.first_repeat]
    out = tuple(Validate(trial=n, repeats=(r, 1)) for r in others)
    decided = dispatch(state, study, NOW, Pooled(out=out, free=0))
    assert all(type(d).__name__ != "Write" for d in decided)


def test_a_bad_gpus_flag_is_one_line_and_makes_no_run_folder(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kneepoint.cli.main", "tune", str(SMALL), "--gpus", "3-1",
         "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--gpus" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_a_server_inherits_no_secret_of_the_agents_environment() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf_x",
        "PGPASSWORD": "pw",
        "KNEEPOINT_STORAGE": "postgresql+psycopg://u:pw@db/kneepoint",
        "HF_HOME": "/models",
    }
    assert inherited_env(environ) == {"PATH": "/usr/bin", "HF_HOME": "/models"}


def test_a_validation_in_case_leaves_a_first_phase_for_each_screen_out(tmp_path: Path) -> None:
    """A finalist's next phase measured in case takes no slot a screen still out may need for
    its own first phase: a better finalist landing next would wait on it."""
    folder, _ = _run(tmp_path, 8)
    events = list(folder.ledger.recover())
    study = load_study(SMALL)
    first = next(i for i, e in enumerate(events) if isinstance(e, Screened) and e.finalist)
    screened = events[first]
    assert isinstance(screened, Screened)
    proposal = next(e for e in events if isinstance(e, Proposed)).proposal
    before = RunState.replay(events[: first + 1])
    other = before.next_trial_number()
    state = RunState.replay([*events[: first + 1], Proposed(trial=other, proposal=proposal)])
    phase = study.tuning.validate_repeats
    free = 2 * phase  # both phases alone; the first and a screen's first phase beside it
    alone = dispatch(before, study, NOW, Pooled(free=free, dry=True))
    beside = dispatch(state, study, NOW, Pooled(out=(Screen(trial=other),), free=free, dry=True))
    mine = [s for s in beside if isinstance(s, Validate) and s.trial == screened.trial]
    assert len([s for s in alone if isinstance(s, Validate)]) == 2 * phase
    assert len(mine) == phase


def test_a_burst_check_that_measures_nothing_is_recorded_without_a_step(tmp_path: Path) -> None:
    """With the burst check off, the driver records why and places no step for it; on, the
    check is a step like the others."""
    off = load_study(SMALL, ["tuning.burst.enabled=false"])
    folder, pool = _run(tmp_path / "off", 4, off)
    state = RunState.replay(list(folder.ledger.recover()))
    assert state.burst is not None and state.burst.skipped == "tuning.burst.enabled is false"
    assert "burst" not in {key for key, _, _ in pool.landings}
    _, pool = _run(tmp_path / "on", 4)
    assert "burst" in {key for key, _, _ in pool.landings}
