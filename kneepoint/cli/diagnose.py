"""``kneepoint diagnose``: what binds on a server, and what would help. Changes nothing.

    kneepoint diagnose STUDY.yaml                           the study's backend and config
    kneepoint diagnose STUDY.yaml --url http://host:8000    a running server, the study's traffic
    kneepoint diagnose --url http://host:8000 --gpu h100-sxm --model llama-3.1-8b [--workload chat]
    kneepoint diagnose --from PATH        re-read a recording with today's rules, no server: a
                                          sweep.json (study.yaml beside or one folder up), a
                                          diagnose folder, or a tune run (its baseline's sweep)

The report goes to stdout and, with the measured points, into runs/diagnose-<study>-<time>/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kneepoint.config import (
    ConfigError,
    Problem,
    add_overrides_argument,
    arguments,
    load_study,
    study_from_mapping,
)

if TYPE_CHECKING:
    from kneepoint.records import StudySpec, SweepResult


def add_diagnose_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = commands.add_parser(
        "diagnose", help="name what binds on a server and the knobs worth trying (changes nothing)"
    )
    cmd.add_argument("study", type=Path, nargs="?", help="a study YAML file")
    cmd.add_argument("--url", help="diagnose this running server (attach)")
    cmd.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="the variable of this environment "
        "holding the server's API key (sent as a Bearer token)",
    )
    cmd.add_argument("--gpu", help="the server's GPU (catalogue name), without a study")
    cmd.add_argument("--model", help="the served model (catalogue name or config.json path)")
    cmd.add_argument("--workload", default="chat", help="workload preset (default: chat)")
    cmd.add_argument(
        "--from",
        dest="recorded",
        type=Path,
        metavar="PATH",
        help="re-diagnose a recording (sweep.json, diagnose folder or tune run)",
    )
    cmd.add_argument(
        "--knee-rps", type=arguments.rate_rps, help="a known knee: probe past and below it only"
    )
    cmd.add_argument("--runs-dir", type=Path, default=Path("runs"))
    add_overrides_argument(
        cmd, "override a study field, e.g. engine.max_num_seqs=256 (what the server runs)"
    )
    cmd.set_defaults(handler=run_diagnose)


def _study(args: argparse.Namespace) -> StudySpec:
    overrides = list(args.overrides)
    if args.api_key_env and not args.url:
        raise ConfigError([Problem("--api-key-env", None, (), "goes with --url")])
    if args.url:
        key = f", api_key_env: '{args.api_key_env}'" if args.api_key_env else ""
        overrides.append(f"backend={{kind: attach, url: '{args.url}'{key}}}")
    if args.study is not None:
        return load_study(args.study, overrides)
    missing = [
        flag
        for flag, value in (("--url", args.url), ("--gpu", args.gpu), ("--model", args.model))
        if not value
    ]
    if missing:
        message = f"without a study file, give {', '.join(missing)}"
        raise ConfigError([Problem("kneepoint diagnose", None, (), message)])
    raw: dict[str, Any] = {
        "name": "attached",
        "gpu": args.gpu,
        "model": args.model,
        "workload": args.workload,
        "engine": {},
    }
    return study_from_mapping(raw, "kneepoint diagnose", overrides)


def _recording(path: Path) -> tuple[StudySpec, SweepResult]:
    """The study and sweep a recording holds; a tune run's is its baseline's knee search."""
    from kneepoint.calibration import is_run_folder, load_recorded
    from kneepoint.run import RunFolder

    study = RunFolder.existing(path).study() if is_run_folder(path) else None
    recorded = load_recorded(path, study)
    return recorded.study, recorded.result


def _kept(folder: Path) -> str:
    """Where a diagnosis that failed or was interrupted keeps what it measured; with nothing
    measured, no folder is left."""
    kept = folder / "sweep.json"
    if not kept.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        return ""
    return f"; what it measured is in {kept} (kneepoint diagnose --from {folder})"


def _write_study(folder: Path, study: StudySpec) -> None:
    """With the study beside its sweep.json, the folder is a recording `kneepoint calibrate`
    and benchmarks/real_fidelity.py can read."""
    import yaml

    from kneepoint.run import write_atomically

    resolved = yaml.safe_dump(study.model_dump(mode="json"), sort_keys=False)
    write_atomically(folder / "study.yaml", resolved)


def run_diagnose(args: argparse.Namespace) -> int:
    from kneepoint.cli.console import progress_for
    from kneepoint.config import check_output, knob_catalogue
    from kneepoint.records import noted
    from kneepoint.report import findings_document, to_markdown
    from kneepoint.run import write_atomically
    from kneepoint.tune import measure_and_diagnose, recorded

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    check_output("--runs-dir", args.runs_dir, directory=True)
    if args.recorded is not None:
        if args.study is not None or args.url:
            message = "--from reads a recording: give no study file and no --url with it"
            raise ConfigError([Problem("kneepoint diagnose", None, (), message)])
        study, result = _recording(args.recorded)
        folder = args.runs_dir / f"diagnose-{study.name}-{stamp}"
        findings = recorded(study, result, knob_catalogue())
        write_atomically(folder / "sweep.json", result.model_dump_json(indent=1) + "\n")
    else:
        study = _study(args)
        folder = args.runs_dir / f"diagnose-{study.name}-{stamp}"
        _write_study(folder, study)  # first: an interrupted diagnosis is a recording too
        with noted(lambda: _kept(folder)):
            findings = measure_and_diagnose(
                study, folder, knob_catalogue(), progress_for(sys.stderr), args.knee_rps
            )
    text = to_markdown(findings_document(study, *findings), folder)
    write_atomically(folder / "diagnosis.md", text)
    body = {
        "diagnosis": findings.diagnosis.model_dump(mode="json"),
        "pruning": findings.pruning.model_dump(mode="json"),
    }
    write_atomically(folder / "diagnosis.json", json.dumps(body, indent=1) + "\n")
    _write_study(folder, study)
    sys.stdout.write(text + f"\nwritten: {folder}\n")
    return 0
