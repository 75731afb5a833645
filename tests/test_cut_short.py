"""A validation the device-hour budget ends between its phases: the next phase is priced at
what its pairs have cost, the verdict is read from the pairs measured (one pair never
promotes), and a pool's driver ends it where the budget left does not cover that phase
instead of running past the budget (vLLM's CPU build, benchmarks/peer_autotune.py: a
validation's six pairs took 552 s with 358 s left, a run 21% over its budget)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from kneepoint.config import knob_catalogue, load_study
from kneepoint.measure import LogProgress
from kneepoint.policies.judge import cut_short, next_phase_s
from kneepoint.records import (
    Event,
    Finished,
    PartMeasured,
    Validate,
    Validated,
    ValidationPart,
)
from kneepoint.run import RunFolder, RunState
from kneepoint.run.ledger import Ledger
from kneepoint.tune import PoolTuner, VirtualPool
from kneepoint.tune.budget import expected_step_s
from kneepoint.tune.dispatch import Pooled, Write, dispatch

from .conftest import SMALL, TuneRun, kneepoint_main

NOW = datetime(2026, 12, 7, 3, 0).astimezone()


def _first_phase(tmp_path: Path) -> tuple[list[Event], list[ValidationPart]]:
    """A pooled small-tune's events as they stood once trial 1's first validation phase was
    in (its next phase, measured in case beside it, left out) and that phase's parts. The
    judge could not tell trial 1's gain from two pairs: it was judged on four."""
    study = load_study(SMALL)
    folder = RunFolder.create(tmp_path, study, NOW)
    PoolTuner(folder, study, LogProgress(), knob_catalogue(), VirtualPool(8)).run()
    events = list(folder.ledger.recover())
    n = study.tuning.validate_repeats

    def later(e: Event) -> bool:
        return (
            isinstance(e, PartMeasured)
            and e.validation is not None
            and (e.validation.trial == 1 and e.validation.first_repeat >= n)
        )

    parts = [e.validation for e in events if isinstance(e, PartMeasured) and e.validation
             and e.validation.trial == 1 and not later(e)]  # fmt: skip
    last = max(i for i, e in enumerate(events) if isinstance(e, PartMeasured)
               and e.validation in parts)  # fmt: skip
    judged = next(e for e in events if isinstance(e, Validated) and e.trial == 1)
    assert judged.judgement is not None and judged.judgement.n_challenger == 2 * n
    return [e for e in events[: last + 1] if not later(e)], parts


def test_the_next_phase_costs_its_pairs_at_what_this_validations_pairs_cost(
    tmp_path: Path,
) -> None:
    _, parts = _first_phase(tmp_path)
    study = load_study(SMALL)
    per_pair = sum(p.device_s for p in parts) / len(parts)
    assert abs(next_phase_s(study, parts) - study.tuning.validate_repeats * per_pair) < 1e-6


def test_a_validation_cut_short_reads_its_verdict_from_the_pairs_measured(
    tmp_path: Path,
) -> None:
    _, parts = _first_phase(tmp_path)
    study = load_study(SMALL)
    one = cut_short(study, 1, parts[:1], (), left_s=12.0)
    assert one.judgement is not None and not one.promote
    assert "one pair, which cannot tell a gain from noise" in one.judgement.reason
    assert "the budget's 12 s left did not cover its next phase" in one.judgement.reason
    assert one.device_s == parts[0].device_s
    both = cut_short(study, 1, parts, (), left_s=0.0)
    assert both.judgement is not None and both.judgement.n_challenger == len(parts) == 2
    assert not both.promote  # the pool's judge wanted more pairs than these two
    assert "the budget's 0 s left did not cover its next phase" in both.judgement.reason


def test_a_pool_ends_a_validation_whose_next_phase_the_budget_cannot_pay_for(
    tmp_path: Path,
) -> None:
    events, parts = _first_phase(tmp_path)
    state = RunState.replay(events)
    roomy = dispatch(state, load_study(SMALL), NOW, Pooled(free=8))
    assert [d for d in roomy if isinstance(d, Validate) and d.trial == 1], "the next phase"
    spent = sum(p.device_s for p in parts)
    hours = (state.device_s + spent + next_phase_s(load_study(SMALL), parts) / 2) / 3600.0
    short = load_study(SMALL, [f"budget.max_device_hours={hours}"])
    decided = dispatch(state, short, NOW, Pooled(free=8))
    ended = [d.event for d in decided if isinstance(d, Write)]
    assert not [d for d in decided if isinstance(d, Validate) and d.trial == 1]
    assert len(ended) == 1 and isinstance(ended[0], Validated) and ended[0].trial == 1
    assert ended[0].judgement is not None and not ended[0].promote
    assert "did not cover its next phase" in ended[0].judgement.reason


def test_one_gpus_validation_stops_where_the_budget_left_cannot_pay_its_next_phase(
    small_run: TuneRun, tmp_path: Path
) -> None:
    """On one GPU the validation measures its phases in one step: with a budget that covers
    its expected cost but not the whole of it, it ends between phases, and the run ends
    near its budget rather than a whole validation past it."""
    events = Ledger(small_run.folder / "ledger.jsonl").read()
    at = next(i for i, e in enumerate(events) if isinstance(e, Validated) and e.judgement
              and e.judgement.n_challenger > 1)  # fmt: skip
    validated = events[at]  # the first validation whose first pair could not tell
    assert isinstance(validated, Validated)
    study = load_study(small_run.folder / "study.yaml")
    before = RunState.replay(events[:at], study.objective)
    expected = expected_step_s(before, study, "validation")
    assert expected is not None and expected < validated.device_s
    hours = (before.device_s + (expected + validated.device_s) / 2) / 3600.0
    done = kneepoint_main("tune", SMALL, "--runs-dir", tmp_path,
                          "--set", f"budget.max_device_hours={hours}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (folder,) = tmp_path.iterdir()
    run = Ledger(folder / "ledger.jsonl").read()
    cut = next(e for e in run if isinstance(e, Validated) and e.trial == validated.trial)
    assert cut.judgement is not None and "did not cover its next phase" in cut.judgement.reason
    end = next(i for i, e in enumerate(run) if isinstance(e, Finished))
    state = RunState.replay(run[: end + 1], study.objective)
    assert state.finished is not None and state.finished.reason == "max_device_hours"
    assert state.device_s <= hours * 3600.0 + expected / 2
