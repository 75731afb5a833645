"""``kneepoint worker``: one worker of a tuning run shared by many GPUs (and hosts) through a
PostgreSQL study; see docs/workers.md.

    kneepoint worker --storage postgresql+psycopg://... --study study.yaml --gpu 0
    kneepoint worker --study NAME --gpu 1        (KNEEPOINT_STORAGE holds the URL)

The first worker given a study file publishes it; the others join with the same file or its
name. Each owns one GPU, claims tasks and plans rounds with the others, and exits when the
study has finished, with best.yaml and the winner's serve command in its own run folder.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kneepoint.config import ConfigError, Problem, add_overrides_argument, load_study
from kneepoint.records import EXIT_RUN_FAILED

if TYPE_CHECKING:
    from kneepoint.records import StudySpec
    from kneepoint.workers import SharedStudy

STORAGE_VARIABLE = "KNEEPOINT_STORAGE"


def add_worker_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser(
        "worker", help="one worker (one GPU) of a tuning run shared through PostgreSQL"
    )
    worker.add_argument(
        "--storage",
        help="the shared Optuna storage, postgresql+psycopg://... "
        f"(default: ${STORAGE_VARIABLE}, which keeps a password off the "
        "process list)",
    )
    worker.add_argument(
        "--study",
        required=True,
        help="a study YAML file (the first worker "
        "publishes it) or the name of a study already published",
    )
    worker.add_argument(
        "--gpu",
        type=int,
        default=0,
        help="the GPU this worker owns (its "
        "servers get CUDA_VISIBLE_DEVICES=N; NVML reads index N)",
    )
    worker.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where this worker's run folder goes"
    )
    worker.add_argument(
        "--heartbeat-s", type=int, default=30, help="seconds between a claimed task's heartbeats"
    )
    worker.add_argument(
        "--grace-s",
        type=int,
        default=120,
        help="a task silent this long is failed and queued again for another worker",
    )
    worker.add_argument(
        "--max-retry", type=int, default=2, help="times a task whose workers died is queued again"
    )
    worker.add_argument(
        "--poll-s",
        type=float,
        default=2.0,
        help="seconds between looks while other workers' tasks are out",
    )
    add_overrides_argument(worker, "override a study field (the publishing worker only)")
    worker.set_defaults(handler=run_worker)


def _bad(field: str, message: str) -> ConfigError:
    return ConfigError([Problem(field, None, (), message)])


def _open(args: argparse.Namespace, now: datetime) -> tuple[SharedStudy, StudySpec]:
    from kneepoint.tune import study_checks
    from kneepoint.workers import SharedStudy, published_start

    url = args.storage or os.environ.get(STORAGE_VARIABLE)
    if not url:
        raise _bad("--storage", f"give the shared storage's URL, or set {STORAGE_VARIABLE}")
    if args.gpu < 0 or args.heartbeat_s < 1 or args.grace_s <= args.heartbeat_s:
        raise _bad(
            "--gpu/--heartbeat-s/--grace-s",
            "the GPU is an index from 0; a heartbeat "
            "is at least 1 s and the grace period longer than it",
        )

    def shared_study(name: str, create: bool = False) -> SharedStudy:
        return SharedStudy(
            url,
            name,
            heartbeat_s=args.heartbeat_s,
            grace_s=args.grace_s,
            max_retry=max(0, args.max_retry),
            create=create,
        )

    path = Path(args.study)
    if path.is_file():
        # Checked as of the run's start: a worker joining (or restarted) after the deadline
        # finds the run finished rather than its study refused. Nothing is written to the
        # storage before the study passes.
        started = published_start(shared_study, load_study(path, args.overrides).name)
        spec = load_study(path, args.overrides, study_checks(started or now))
        shared = shared_study(spec.name, create=True)
        shared.publish(spec, now)
        return shared, spec
    if args.overrides:
        raise _bad("--set", "only the worker that publishes a study file may override it")
    shared = shared_study(args.study)
    return shared, shared.spec()


def _on_gpu(study: StudySpec, gpu: int) -> StudySpec:
    """The study as this worker runs it: its launched servers on its own GPU."""
    return study.model_copy(update={"backend": study.backend.on_gpus((str(gpu),))})


def run_worker(args: argparse.Namespace) -> int:
    from kneepoint.cli.console import progress_for
    from kneepoint.config import check_output, knob_catalogue
    from kneepoint.load import rules
    from kneepoint.probes.runtime import configure_logging
    from kneepoint.run import RunFolder, serve_command
    from kneepoint.tune import launched_vllm
    from kneepoint.workers import Worker

    now = datetime.now().astimezone()
    check_output("--runs-dir", args.runs_dir, directory=True)
    shared, published = _open(args, now)
    study = _on_gpu(published, args.gpu)
    host = socket.gethostname()
    name = f"{host}/gpu{args.gpu}/{os.getpid()}"
    folder = RunFolder.create(args.runs_dir, study, now, role=f"worker-{host}-gpu{args.gpu}")
    try:
        configure_logging(
            level=args.log_level, log_file=args.log_file or folder.path / "events.jsonl"
        )
        progress = progress_for(sys.stderr)
        progress.phase("worker", f"{name} on study {study.name}; folder {folder.path}")
        worker = Worker(
            shared,
            study,
            folder,
            progress,
            knob_catalogue(),
            name=name,
            poll_s=args.poll_s,
            vllm_version=launched_vllm(study),
        )
        final = worker.run()
    finally:
        folder.release()
    state, finished = final.state, final.state.finished
    assert finished is not None
    objective = study.objective
    start = rules(objective).value(state.baseline.repeats) if state.baseline else None
    lines = [
        f"study {study.name}: {finished.reason}: {finished.detail}",
        f"objective: {_show(start)} -> {_show(state.incumbent_objective)} after "
        f"{state.trials_run} trials in {final.batches} batches: "
        f"{state.device_s / 3600:.2f} device-hours, {final.makespan_s / 3600:.2f} h on "
        f"the critical path (this worker ran {worker.tasks_done} tasks)",
        f"report of the whole run: {folder.path / 'report.md'}",
    ]
    if state.incumbent is not None:
        lines.append(f"serve the winner with: {serve_command(study, state.incumbent)}")
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_RUN_FAILED if finished.reason == "baseline_failed" else 0


def _show(value: float | None) -> str:
    return "nothing measured" if value is None else f"{value:.2f}"
