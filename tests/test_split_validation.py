"""A validation's repeats split over GPUs (issue "Step 16", part 3: a validation's critical
path was its repeats in a row): with several workers the planner queues a round's
validations a repeat a task, best finalist first; the parts' judgement is ``kneepoint
tune``'s on the same repeats, its second phase is queued only when the first cannot tell,
and a part every attempt of which died fails the trial. The baseline's repeats are split
alike, after its knee search. Built from a real small-tune ledger without the early look
(two repeats a phase; trial 1 went on to a second phase, trial 3 did not); the early look's
one pair, judged against the incumbent's known repeats, on the early run's own ledger."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from kneepoint.config import knob_catalogue, load_study
from kneepoint.load import merge
from kneepoint.policies.judge import judged, next_repeats
from kneepoint.records.actions import JoinBaseline, MeasureRepeats, Screen, SearchKnee, Validate
from kneepoint.records.ledger import (
    Baseline,
    Event,
    Finished,
    Promoted,
    Proposed,
    Screened,
    Validated,
)
from kneepoint.records.study import StudySpec
from kneepoint.records.sweep import SweepResult
from kneepoint.records.task import BaselinePart, Task, TaskResult, ValidationPart
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from kneepoint.workers.plan import plan
from kneepoint.workers.shared_study import Attempts
from kneepoint.workers.state import Shared, shared_state

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


def _attempts(task: Task, *events: Event, **result: object) -> Attempts:
    done = TaskResult.model_validate({"worker": "h/gpu0", "events": events, **result})
    return Attempts(task, done, pending=False, failed=0)


def _screened_trial_1(events: list[Event]) -> list[Attempts]:
    baseline, proposed, screened = events[1], events[2], events[3]
    assert isinstance(baseline, Baseline) and isinstance(proposed, Proposed)
    assert isinstance(screened, Screened) and screened.finalist
    return [
        _attempts(Task(action=JoinBaseline(), generation=0), baseline),
        _attempts(
            Task(action=Screen(trial=1), generation=0, batch=2, proposal=proposed.proposal),
            screened,
        ),
    ]


def _two_finalists(events: list[Event], study: StudySpec) -> RunState:
    """Trials 1 and 2 proposed in one round against the baseline, both screened finalists."""
    state = RunState.replay(list(events[:2]), study.objective)
    first, second = events[2], events[6]
    assert isinstance(first, Proposed) and isinstance(second, Proposed)
    for event in (first, second, events[3], events[7]):
        state.apply(event)
    return state


def _repeats(task: Task) -> tuple[int, int]:
    assert isinstance(task.action, Validate | MeasureRepeats) and task.action.repeats
    return task.action.repeats


def _part_task(first: int, batch: int) -> Task:
    return Task(action=Validate(trial=1, repeats=(first, 1)), generation=0, batch=batch)


def test_spare_gpus_split_a_finalists_repeats_and_the_second_phase_follows(
    phased_run: TuneRun,
) -> None:
    events, study = _ledger(phased_run)
    tasks = _screened_trial_1(events)
    started = NOW
    shared = shared_state(study, started, tasks, None)
    queued = plan(shared, study, knob_catalogue(), 3, NOW).tasks
    assert [(t.action.step, _repeats(t)) for t in queued] == [
        ("validate", (0, 1)),
        ("validate", (1, 1)),
    ]
    assert [t.key for t in queued] == ["trial-1-validate-r0", "trial-1-validate-r1"]

    parts = _parts(_validated(events, 1))
    tasks += [_attempts(_part_task(p.first_repeat, 3), part=p) for p in parts[:2]]
    shared = shared_state(study, started, tasks, None)
    assert not any(isinstance(e, Validated) for e in shared.events), "phase 1 cannot tell"
    queued = plan(shared, study, knob_catalogue(), 3, NOW).tasks
    assert [_repeats(t) for t in queued] == [(2, 1), (3, 1)], "the second phase, split"

    tasks += [_attempts(_part_task(p.first_repeat, 4), part=p) for p in parts[2:]]
    shared = shared_state(study, started, tasks, None)
    assert isinstance(shared.events[-1], Validated), "judged after its last part"
    judgement = shared.events[-1].judgement
    assert judgement is not None and judgement.promote
    assert judgement.reason == _validated(events, 1).judgement.reason  # type: ignore[union-attr]
    [promote] = plan(shared, study, knob_catalogue(), 3, NOW).tasks
    assert promote.key == "trial-1-promote"
    assert RunState.replay(list(shared.events), study.objective).trials[1].validated is not None


def test_two_finalists_repeats_are_a_task_each_best_screened_first(phased_run: TuneRun) -> None:
    """Six repeats on three GPUs take two repeats' time as tasks of one repeat each, where
    a split by finalist (two GPUs for the best, one for the other) took three."""
    events, study = _ledger(phased_run)
    state = _two_finalists(events, study)
    best = max(state.open_trials(), key=lambda t: t.measured_objective() or 0.0).trial
    other = 3 - best
    shared = Shared(state, (), (), frozenset({"baseline", "trial-1-screen", "trial-2-screen"}), 2)
    queued = plan(shared, study, knob_catalogue(), 3, NOW).tasks
    assert [(t.trial, _repeats(t)) for t in queued] == [
        (best, (0, 1)), (best, (1, 1)), (other, (0, 1)), (other, (1, 1))
    ]  # fmt: skip
    assert {t.workers for t in queued} == {3}
    [alone] = plan(shared, study, knob_catalogue(), 1, NOW).tasks
    assert (alone.trial, _repeats(alone)) == (best, (0, 2)), "one worker: tune's order"


def test_a_part_every_attempt_of_which_died_fails_the_trial(phased_run: TuneRun) -> None:
    events, study = _ledger(phased_run)
    tasks = _screened_trial_1(events)
    [kept, _] = _parts(_validated(events, 1))[:2]
    tasks += [
        _attempts(_part_task(0, 3), part=kept),
        Attempts(_part_task(1, 3), None, pending=False, failed=3),
    ]
    shared = shared_state(study, NOW, tasks, None)
    validated = shared.events[-1]
    assert isinstance(validated, Validated) and validated.failure is not None
    assert validated.failure.status == "crashed" and "3 workers" in validated.failure.detail
    assert validated.device_s == pytest.approx(kept.device_s), "what the kept part spent"
    assert shared.state.trials[1].next_step() is None, "the trial is over"


def test_the_baseline_is_its_knee_search_then_its_repeats_split_then_made_of_them(
    phased_run: TuneRun,
) -> None:
    events, study = _ledger(phased_run)
    baseline = events[1]
    assert isinstance(baseline, Baseline)
    catalogue, n = knob_catalogue(), study.tuning.validate_repeats

    def planned(tasks: list[Attempts]) -> list[Task]:
        return list(plan(shared_state(study, NOW, tasks, None), study, catalogue, 3, NOW).tasks)

    [knee] = planned([])
    assert knee.key == "knee"
    knee_part = BaselinePart(sweep=baseline.knee, device_s=100.0)
    tasks = [_attempts(knee, baseline_part=knee_part)]
    repeats = planned(tasks)
    assert [(t.key, _repeats(t)) for t in repeats] == [
        (f"repeats-r{i}", (i, 1)) for i in range(n)
    ], "one repeat a GPU, up to the study's repeats"
    for task in repeats:
        part = BaselinePart(
            first_repeat=_repeats(task)[0],
            repeats=1,
            sweep=_repeat(baseline.repeats, _repeats(task)[0]),
            device_s=50.0,
        )
        tasks.append(_attempts(task, baseline_part=part))
    [made] = planned(tasks)
    assert made.key == "baseline" and made.batch == 3
    shared = shared_state(study, NOW, [*tasks, _attempts(made, baseline)], None)
    assert shared.state.baseline == baseline and len(shared.baseline_parts) == 1 + n
    assert shared.makespan_s == 150.0, "the knee search, then the repeats side by side"


def test_a_knee_search_whose_server_failed_fails_the_run(phased_run: TuneRun) -> None:
    _, study = _ledger(phased_run)
    knee = Task(action=SearchKnee(), generation=0)
    shared = shared_state(study, NOW, [_attempts(knee, failure="server died: exit 1")], None)
    assert shared.state.finished is not None
    assert shared.state.finished.reason == "baseline_failed"
    assert shared.state.finished.detail == "server died: exit 1"


def test_a_finalist_whose_first_repeats_could_not_tell_goes_on_before_a_promotion(
    phased_run: TuneRun,
) -> None:
    """Trial 1 won at +50% while trial 2's first repeats could not tell, at +97%: trial 2's
    second phase is measured before the promotion that would close it (it may be the better
    winner)."""
    events, study = _ledger(phased_run)
    state = _two_finalists(events, study)
    state.apply(_modest(_validated(events, 1)))  # trial 1: promote, at +50%
    begun = _parts(_validated(events, 2))[:2]  # trial 2: its first phase, underpowered
    assert judged(study, 2, begun) is None
    planned = frozenset({"baseline", "trial-1-screen", "trial-2-screen"})
    shared = Shared(state, (), (), planned, 3, parts={2: tuple(begun)})
    queued = plan(shared, study, knob_catalogue(), 3, NOW).tasks
    assert [(t.action.step, t.trial, _repeats(t)) for t in queued] == [
        ("validate", 2, (2, 1)), ("validate", 2, (3, 1))
    ]  # fmt: skip
    alone = Shared(state, (), (), planned, 3)
    [promote] = plan(alone, study, knob_catalogue(), 3, NOW).tasks
    assert promote.key == "trial-1-promote", "nothing begun: the winner is promoted"


def _modest(validated: Validated) -> Validated:
    """``validated`` as if its gain had measured +50%."""
    assert validated.judgement is not None
    judgement = validated.judgement.model_copy(update={"gain_rel": 0.5})
    return validated.model_copy(update={"judgement": judgement})


def test_a_finalist_whose_first_repeats_put_it_below_the_winner_is_closed_by_its_promotion(
    phased_run: TuneRun,
) -> None:
    """Trial 1 won at about +480% while trial 2's first pairs, at +97%, could not tell at the
    early look's 97.5%: trial 2 cannot be the better winner, so the promotion does not wait
    for its other repeats; it closes trial 2 with that verdict, and the repeats it measured
    stay in the run's device time."""
    events, study = _ledger(phased_run)
    tasks = _screened_trial_1(events)
    second, screened = events[6], events[7]
    assert isinstance(second, Proposed) and isinstance(screened, Screened) and screened.finalist
    tasks.append(_attempts(
        Task(action=Screen(trial=2), generation=0, batch=2, proposal=second.proposal),
        screened.model_copy(update={"trial": 2}),
    ))  # fmt: skip
    won, begun = _parts(_validated(events, 1)), _parts(_validated(events, 2))[:2]
    for part in (*won, *begun):
        task = Task(action=Validate(trial=part.trial, repeats=(part.first_repeat, 1)),
                    generation=0, batch=3)  # fmt: skip
        tasks.append(_attempts(task, part=part))
    shared = shared_state(study, NOW, tasks, None)
    assert [e.trial for e in shared.events if isinstance(e, Validated)] == [1]
    [promote] = plan(shared, study, knob_catalogue(), 3, NOW).tasks
    assert promote.key == "trial-1-promote"

    [promoted] = [e for e in events if isinstance(e, Promoted) and e.trial == 1]
    tasks.append(_attempts(promote.model_copy(update={"batch": 4}), promoted))
    after = shared_state(study, NOW, tasks, None)
    closed = next(e for e in after.events if isinstance(e, Validated) and e.trial == 2)
    assert closed.judgement is not None and not closed.judgement.promote
    assert re.search(r"below the round's winner \(\+4\d\d\.\d%\)", closed.judgement.reason)
    assert closed.device_s == pytest.approx(sum(p.device_s for p in begun))
    assert after.events.index(closed) == after.events.index(promoted) - 1
    assert after.state.device_s - shared.state.device_s == pytest.approx(closed.device_s)


def test_two_failed_baseline_repeats_fail_the_run_once(phased_run: TuneRun) -> None:
    events, study = _ledger(phased_run)
    baseline = events[1]
    assert isinstance(baseline, Baseline)
    knee = Task(action=SearchKnee(), generation=0)
    tasks = [_attempts(knee, baseline_part=BaselinePart(sweep=baseline.knee, device_s=1.0))]
    for first in (0, 1):
        part = Task(action=MeasureRepeats(repeats=(first, 1)), generation=0, batch=2)
        tasks.append(_attempts(part, failure=f"repeat {first}: server died"))
    shared = shared_state(study, NOW, tasks, None)
    finished = [e for e in shared.events if isinstance(e, Finished)]
    assert [f.detail for f in finished] == ["repeat 0: server died"]
    assert shared.state.finished is not None


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


def test_one_worker_measures_the_early_pair_first(small_run: TuneRun) -> None:
    events, study = _ledger(small_run)
    shared = shared_state(study, NOW, _screened_trial_1(events), None)
    queued = plan(shared, study, knob_catalogue(), 1, NOW).tasks
    assert [(t.action.step, _repeats(t)) for t in queued] == [("validate", (0, 1))]


def test_validations_that_fill_the_workers_measure_their_early_pairs_first(
    phased_run: TuneRun,
) -> None:
    """Two finalists on two or three GPUs: each its early pair (no GPU waits on it); on four,
    each its first phase split, as without the early look."""
    events, _ = _ledger(phased_run)
    _, study = _ledger(phased_run)
    early = study.model_copy(
        update={"tuning": study.tuning.model_copy(update={"early_look": True})}
    )
    state = _two_finalists(events, early)
    planned = frozenset({"baseline", "trial-1-screen", "trial-2-screen"})
    shared = Shared(state, (), (), planned, 2)
    for workers in (2, 3):
        queued = plan(shared, early, knob_catalogue(), workers, NOW).tasks
        assert sorted((t.trial, _repeats(t)) for t in queued) == [(1, (0, 1)), (2, (0, 1))]
    queued = plan(shared, early, knob_catalogue(), 4, NOW).tasks
    assert sorted((t.trial, _repeats(t)) for t in queued) == [
        (1, (0, 1)), (1, (1, 1)), (2, (0, 1)), (2, (1, 1))
    ]  # fmt: skip
