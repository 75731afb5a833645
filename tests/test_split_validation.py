"""A validation's repeats split over GPUs (issue "Step 16", part 3: a validation's critical
path was its repeats in a row): a pool measures a validation's repeats a part each
(``kneepoint.tune.dispatch``); the parts' judgement is ``kneepoint tune``'s on the same repeats,
and a finalist whose first parts cannot beat the round's winner is closed before the winner's
promotion. Built from a real small-tune ledger without the early look (two repeats a phase;
trial 1 went on to a second phase, trial 3 did not); the early look's one pair, judged against
the incumbent's known repeats, on the early run's own ledger."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from kneepoint.config import load_study
from kneepoint.load import merge
from kneepoint.policies.judge import judged, next_repeats
from kneepoint.records.actions import Promote
from kneepoint.records.ledger import Event, PartMeasured, Proposed, Screened, Validated
from kneepoint.records.shares import ValidationPart
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepResult
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.tune.dispatch import Pooled, Write, dispatch

from .conftest import SMALL, TuneRun, kneepoint_main, shared_run

NOW = datetime(2026, 11, 23, 8, 0).astimezone()


def _ledger(run: TuneRun) -> tuple[list[Event], StudySpec]:
    events = list(Ledger(run.folder / "ledger.jsonl").read())
    return events, load_study(run.folder / "study.yaml")


@pytest.fixture(scope="module")
def phased_run(tmp_path_factory: pytest.TempPathFactory) -> TuneRun:
    """small-tune without the early look: each validation measured in whole phases, as
    several GPUs measure them (the runs these splits are built from)."""
    return shared_run(tmp_path_factory, "phased-run", lambda: _phased_run(tmp_path_factory))


def _phased_run(tmp_path_factory: pytest.TempPathFactory) -> TuneRun:
    runs = tmp_path_factory.mktemp("phased-runs")
    done = kneepoint_main("tune", SMALL, "--runs-dir", runs, "--set", "tuning.early_look=false")
    assert done.returncode == 0, done.stderr
    (folder,) = runs.iterdir()
    return TuneRun(folder, done.stdout, done.stderr)


def _known(events: list[Event], study: StudySpec, trial: int) -> tuple[float, ...]:
    """The incumbent's objective over its repeats when ``trial`` was validated."""
    before = events[: events.index(_validated(events, trial))]
    return RunState.replay(before, study.objective).incumbent_by_repeat


def _validated(events: list[Event], trial: int) -> Validated:
    [found] = [e for e in events if isinstance(e, Validated) and e.trial == trial]
    return found


def _repeat(result: SweepResult | None, repeat: int) -> SweepResult:
    assert result is not None
    one = result.model_copy(update={"points": [p for p in result.points if p.repeat == repeat]})
    return merge([one])


def _parts(validated: Validated) -> list[ValidationPart]:
    """The ledger's validation, one part per repeat (as three or more GPUs measure it)."""
    assert validated.challenger is not None
    repeats = sorted({p.repeat for p in validated.challenger.points})
    return [
        ValidationPart(
            trial=validated.trial,
            first_repeat=r,
            repeats=1,
            incumbent=_repeat(validated.incumbent, r),
            challenger=_repeat(validated.challenger, r),
            device_s=validated.device_s / len(repeats),
        )
        for r in repeats
    ]


@pytest.mark.parametrize("trial", [1, 3])
def test_parts_are_judged_as_tune_judged_the_same_repeats(phased_run: TuneRun, trial: int) -> None:
    events, study = _ledger(phased_run)
    validated = _validated(events, trial)
    parts = _parts(validated)
    again = judged(study, trial, parts)
    assert again is not None and again.judgement is not None and validated.judgement is not None
    assert again.judgement.reason == validated.judgement.reason
    assert again.device_s == pytest.approx(validated.device_s)
    first = study.tuning.validate_repeats
    if len(parts) > first:  # tune measured a second phase: the first alone could not tell
        assert judged(study, trial, parts[:first]) is None


def test_the_phases_one_pair_first_on_one_free_gpu_the_whole_phase_on_several(
    small_run: TuneRun,
) -> None:
    _, study = _ledger(small_run)
    n = study.tuning.validate_repeats
    assert [next_repeats(study, c) for c in (0, 1, n)] == [range(1), range(1, n), range(n, 2 * n)]
    assert next_repeats(study, 0, side_by_side=3) == range(n)
    off = study.model_copy(update={"tuning": study.tuning.model_copy(update={"early_look": False})})
    assert next_repeats(off, 0) == range(n)


@pytest.mark.parametrize("trial", [1, 3])
def test_one_pair_is_judged_as_tune_judged_it_against_the_known_repeats(
    small_run: TuneRun, trial: int
) -> None:
    """small-tune's trials 1 (+363%, against the baseline's two repeats) and 3 (+70%,
    against its incumbent's four) were promoted from their first pair; without the known
    repeats one pair is no verdict."""
    events, study = _ledger(small_run)
    validated = _validated(events, trial)
    assert validated.judgement is not None and validated.judgement.method == "known_noise"
    parts = _parts(validated)
    assert len(parts) == 1
    again = judged(study, trial, parts, _known(events, study, trial))
    assert again is not None and again.judgement == validated.judgement
    assert again.device_s == pytest.approx(validated.device_s)
    assert judged(study, trial, parts) is None
    assert judged(study, trial, parts, _known(events, study, trial)[:1]) is None
    said = f"trial {trial}: "
    console = [line for line in small_run.stderr.splitlines() if said in line]
    assert any("promoted from its first pair" in line for line in console), console
    report = (small_run.folder / "report.md").read_text()
    assert f"| {trial} | " in report and "| promoted from its first pair |" in report


def test_a_finalist_whose_first_repeats_put_it_below_the_winner_is_closed_by_its_promotion(
    phased_run: TuneRun,
) -> None:
    """Trial 1 won at about +480% while trial 2's first pairs, at +97%, could not tell at the
    early look's 97.5%: trial 2 cannot be the better winner, so the pool's promotion does not
    wait for its other repeats; it closes trial 2 with that verdict first, and the repeats it
    measured stay in the run's device time."""
    events, study = _ledger(phased_run)
    first, second = events[2], events[6]
    assert isinstance(first, Proposed) and isinstance(second, Proposed)
    screened = events[7]
    assert isinstance(screened, Screened) and screened.finalist
    state = RunState.replay(
        [*events[:2], first, second, events[3], screened.model_copy(update={"trial": 2})],
        study.objective,
    )
    won, begun = _parts(_validated(events, 1)), _parts(_validated(events, 2))[:2]
    for part in (*won, *begun):
        state.apply(PartMeasured(validation=part))
    [judged_first] = dispatch(state, study, NOW, Pooled(free=0))
    assert isinstance(judged_first, Write) and isinstance(judged_first.event, Validated)
    assert judged_first.event.trial == 1 and judged_first.event.promote
    state.apply(judged_first.event)
    spent = state.device_s
    [closing] = dispatch(state, study, NOW, Pooled(free=3))
    assert isinstance(closing, Write) and isinstance(closing.event, Validated)
    closed = closing.event
    assert closed.trial == 2 and closed.judgement is not None and not closed.judgement.promote
    assert re.search(r"below the round's winner \(\+4\d\d\.\d%\)", closed.judgement.reason)
    assert closed.device_s == pytest.approx(sum(p.device_s for p in begun))
    state.apply(closed)
    assert state.device_s - spent == pytest.approx(closed.device_s)
    assert dispatch(state, study, NOW, Pooled(free=3)) == [Promote(trial=1)]
