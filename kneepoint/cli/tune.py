"""``kneepoint tune``: the overnight job. Starts a run from a study file, or resumes one.

    kneepoint tune configs/studies/quickstart.yaml      a new run under runs/
    kneepoint tune runs/quickstart-20261122-231500      resume that run
    kneepoint tune --resume runs/quickstart-...         the same

The run folder is locked while the agent works on it (a second agent is refused in one line);
the lock dies with the agent, however it dies, so a killed run resumes at once.

At the end it writes the report (Markdown and HTML), best.yaml and the winner's exact
`vllm serve` command into the run folder, and prints where they are. Its machinery is imported
when it runs (see ``kneepoint.cli.main``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kneepoint.cli.pool import add_pool_arguments
from kneepoint.config import ConfigError, Problem, add_overrides_argument
from kneepoint.records import EXIT_RUN_FAILED

if TYPE_CHECKING:
    from kneepoint.cli.pool import PoolChoice
    from kneepoint.probes.cluster import RayPool
    from kneepoint.records import Objective, StudySpec
    from kneepoint.run import RunFolder, RunState
    from kneepoint.tune import PoolTuner, Tuner


def add_tune_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tune = commands.add_parser(
        "tune", help="tune a study overnight (or resume a run folder) and write its report"
    )
    tune.add_argument("target", type=Path, nargs="?", help="a study YAML file, or a run folder")
    tune.add_argument("--resume", type=Path, metavar="RUN", help="resume this run folder")
    tune.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where runs go")
    tune.add_argument(
        "--repair-ledger",
        action="store_true",
        help="resuming: keep the ledger's valid events before a damaged line and "
        "move the rest aside (to ledger.jsonl.rejected-lineN)",
    )
    add_pool_arguments(tune)
    add_overrides_argument(tune, "override a study field (new runs only)")
    tune.set_defaults(handler=run_tune)


def _open(args: argparse.Namespace) -> tuple[RunFolder, bool]:
    """The run folder, locked, and whether it is resumed: a new one for a study file, or the
    one to resume (then checked by ``_check_resumed``)."""
    from kneepoint.config import check_output, load_study
    from kneepoint.run import RunFolder
    from kneepoint.tune import study_checks

    target: Path | None = args.resume or args.target
    if target is None:
        raise ConfigError([Problem("kneepoint tune", None, (), "give a study file or a run")])
    if target.is_dir():
        if args.overrides:
            raise ConfigError([Problem("--set", None, (), "a resumed run keeps its study")])
        folder = RunFolder.existing(target)
        folder.take_lock(datetime.now().astimezone())  # before the repair writes
        return folder, True
    if args.repair_ledger:
        raise ConfigError(
            [
                Problem(
                    "--repair-ledger",
                    None,
                    (),
                    "repairs a run folder's ledger; give the run, not a study file",
                )
            ]
        )
    check_output("--runs-dir", args.runs_dir, directory=True)
    now = datetime.now().astimezone()
    # Refused before anything starts (kneepoint.tune.feasibility): a baseline cut off by the
    # deadline, or an engine vLLM or the simulator refuses, is device time for nothing.
    study = load_study(target, args.overrides, study_checks(now))
    return RunFolder.create(args.runs_dir, study, now), False


def _check_resumed(folder: RunFolder, args: argparse.Namespace) -> None:
    """A resumed run's ledger repaired where asked, then checked: it must be what its trials
    came from (after a repair too: it may have kept nothing), under the study as it was."""
    if args.repair_ledger:
        _repair(folder)
    folder.check_resumable()
    folder.check_study_unchanged(folder.study())


def _repair(folder: RunFolder) -> None:
    kept, aside = folder.ledger.repair()
    if aside is None:
        print(
            f"kneepoint: {folder.ledger.path}: every line is a valid event; nothing to repair",
            file=sys.stderr,
        )
        return
    folder.set_optuna_aside(aside.name.rsplit(".", 1)[-1])
    print(
        f"kneepoint: {folder.ledger.path}: kept {kept} events; the rest moved to {aside}",
        file=sys.stderr,
    )


def run_tune(args: argparse.Namespace) -> int:
    from kneepoint.cli.pool import from_flags

    args.pool = from_flags(args)  # checked before a run folder is made
    folder, resumed = _open(args)
    try:
        if resumed:
            _check_resumed(folder, args)
        return _tune(folder, args, resumed)
    finally:
        folder.release()


def _tune(folder: RunFolder, args: argparse.Namespace, resumed: bool) -> int:
    from kneepoint.cli.console import ConsoleProgress
    from kneepoint.cli.pool import choose
    from kneepoint.load import rules
    from kneepoint.probes.runtime import configure_logging
    from kneepoint.report import write_report

    # The run's own structured log lives with it, unless the user sent it elsewhere.
    named = "--log-file" if args.log_file is not None else None  # else the run's own file
    log_file = args.log_file or folder.path / "events.jsonl"
    configure_logging(level=args.log_level, log_file=log_file, flag=named)
    choice = choose(args, folder.path, resumed)
    tuner, pool = _tuner(folder, choice)
    try:
        state = tuner.run()
    finally:
        if pool is not None:
            pool.close()
    study = folder.study()
    if isinstance(tuner.progress, ConsoleProgress):
        tuner.progress.finish_bar()  # the summary below starts on a line of its own
    markdown, html = write_report(folder)
    finished = state.finished
    reason = f"{finished.reason}: {finished.detail}" if finished else "not finished"
    objective = study.objective
    start = rules(objective).value(state.baseline.repeats) if state.baseline else None
    best = state.incumbent_objective
    lines = [
        f"run: {folder.path}  ({reason})",
        f"{rules(objective).name()}: {_measured(start, objective)} -> "
        f"{_measured(best, objective)} after {state.trials_run} trials, "
        f"{state.device_s / 3600:.2f} device-hours",
        f"report: {markdown}  {html}",
    ]
    failed = finished is not None and finished.reason == "baseline_failed"
    if state.incumbent is not None and not failed:
        lines += _winner_lines(folder, study, state)
    sys.stdout.write("\n".join(lines) + "\n")
    if failed:
        assert finished is not None
        # Nothing was tuned: the run failed, though its report says what the server did.
        print(f"kneepoint: {folder.path}: the baseline failed: {finished.detail}", file=sys.stderr)
        return EXIT_RUN_FAILED
    return 0


def _tuner(
    folder: RunFolder, choice: PoolChoice | None
) -> tuple[Tuner | PoolTuner, RayPool | None]:
    """Today's loop on one GPU, or the pool's driver over Ray's GPUs."""
    from kneepoint.cli.console import progress_for
    from kneepoint.cli.pool import open_pool, say
    from kneepoint.config import knob_catalogue
    from kneepoint.tune import PoolTuner, Tuner, launched_vllm

    study, progress = folder.study(), progress_for(sys.stderr)
    version = launched_vllm(study)
    if choice is None:
        tuner: Tuner | PoolTuner = Tuner(
            folder, study, progress, knob_catalogue(), vllm_version=version
        )
        pool = None
    else:
        pool = open_pool(choice)
        tuner = PoolTuner(folder, study, progress, knob_catalogue(), pool, vllm_version=version)
    where = "" if choice is None else f" on {say(choice)}"
    progress.phase("run", f"{study.name} in {folder.path}{where}")
    _say_resumed(folder, tuner)
    return tuner, pool


def _say_resumed(folder: RunFolder, tuner: Tuner | PoolTuner) -> None:
    """A resumed run says so, and whether it had already finished (its report is then only
    written again): a finished run resumed rewrote its report without a word."""
    from kneepoint.records import Finished

    events = folder.ledger.read()
    if not events:
        return
    finished = next((e for e in reversed(events) if isinstance(e, Finished)), None)
    detail = f"{len(events)} events in its ledger; "
    detail += (
        f"it had finished ({finished.reason.replace('_', ' ')}): nothing is measured again, "
        "its report is written again from its ledger"
        if finished is not None
        else "it goes on from its last event"
    )
    tuner.progress.phase("resume", detail)


def _winner_lines(folder: RunFolder, study: StudySpec, state: RunState) -> list[str]:
    from kneepoint.run import serve_command

    assert state.incumbent is not None
    unchecked = [str(t.trial) for t in state.trials.values() if t.promoted and t.unchecked_quality]
    caveat = f" (not quality-checked: trial {', '.join(unchecked)})" if unchecked else ""
    said = (
        f"serve the winner with{caveat}:"
        if state.promotions
        else "no trial was promoted: keep serving the starting configuration:"
    )
    return [
        said,
        f"  {serve_command(study, state.incumbent)}",
        f"(also in {folder.path / 'best-command.txt'}; engine config in best.yaml)",
    ]


def _measured(value: float | None, objective: Objective) -> str:
    from kneepoint.load import rules

    return "nothing measured" if value is None else f"{value:.2f} {rules(objective).unit()}"
