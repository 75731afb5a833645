"""The ``kneepoint`` command line.

Exit status: 0 success; 2 bad input (a configuration problem, a usage error, a file that
cannot be read or an output path that cannot be written), told before any server starts; 1
the run failed (a measured server that would not start or died, a baseline that could not be
measured, the simulated engine refusing to start as vLLM does, the OS refusing a file
operation); 130 interrupted (Ctrl-C, SIGTERM or SIGHUP: any server it held is stopped first).
Each failure is one line on stderr (one per problem in a file) and never a traceback.

A command's own machinery (the tuner, the simulated server, Optuna's storage, the report's
plots) is imported when that command runs, not to parse a command line: every command, and
each ``kneepoint sim serve`` a tune launches, starts in about half the time.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import structlog
import yaml

from kneepoint import __version__
from kneepoint.cli.calibrate import add_calibrate_command
from kneepoint.cli.catalogue import add_list_command
from kneepoint.cli.diagnose import add_diagnose_command
from kneepoint.cli.plan import add_plan_command
from kneepoint.cli.report import add_report_command
from kneepoint.cli.sweep import add_sweep_command
from kneepoint.cli.tune import add_tune_command
from kneepoint.config import add_overrides_argument, check_output, load_study, study_file_schema
from kneepoint.probes.runtime import configure_logging, one_blas_thread, unwinding
from kneepoint.records import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_RUN_FAILED,
    KneepointError,
    said_after,
)
from kneepoint.run import write_atomically
from kneepoint.sim import add_serve_arguments, bind_problem, resolve_serve_args

EXIT_OK = 0

log = structlog.get_logger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line like every other bad input (argparse prints
    the whole usage first); subcommands' parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"kneepoint: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every subcommand's options included (what `main` parses)."""
    parser: argparse.ArgumentParser = _Parser(  # its subcommands are _Parsers too
        prog="kneepoint",
        description="Autonomous tuning agent for LLM serving engines (vLLM first). The GPUs, "
        "models, workload presets and knobs a study may name: kneepoint config list "
        "gpus|models|workloads|knobs.",
    )
    parser.add_argument("--version", action="version", version=f"kneepoint {__version__}")
    _add_global_options(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    config = commands.add_parser(
        "config",
        help="validate study files, print their schema, list the catalogues "
        "(kneepoint config list gpus|models|workloads|knobs)",
    )
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = config_commands.add_parser(
        "check", help="validate a study file and print it resolved, with every default"
    )
    check.add_argument("file", type=Path, help="the study YAML file")
    add_overrides_argument(
        check, "override a field, e.g. --set engine.max_num_seqs=128 (repeatable)"
    )
    check.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    check.set_defaults(handler=_config_check)

    add_list_command(config_commands)
    schema = config_commands.add_parser("schema", help="print the JSON Schema of study files")
    schema.add_argument("--output", type=Path, help="write it to this file instead of stdout")
    schema.set_defaults(handler=_config_schema)

    sim = commands.add_parser("sim", help="the built-in simulated serving engine")
    sim_commands = sim.add_subparsers(dest="sim_command", required=True, metavar="ACTION")
    serve = sim_commands.add_parser(
        "serve",
        help="serve a simulated vLLM over HTTP (OpenAI API, /metrics, /telemetry)",
        description="Serve a simulated vLLM engine. Takes `vllm serve` flags for what the "
        "simulator models (e.g. --max-num-seqs 128 --no-enable-prefix-caching).",
    )
    add_serve_arguments(serve)
    serve.set_defaults(handler=_sim_serve, takes_unknown=True)
    add_sweep_command(commands)
    add_tune_command(commands)
    add_diagnose_command(commands)
    add_plan_command(commands)
    add_report_command(commands)
    add_calibrate_command(commands)
    _global_options_everywhere(parser)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    # A subcommand's copy of an option has no default of its own (SUPPRESS), so it only
    # overrides the top-level value when it is actually given after the subcommand.
    level = "warning" if defaults else argparse.SUPPRESS
    log_file = None if defaults else argparse.SUPPRESS
    parser.add_argument(
        "--log-level",
        default=level,
        choices=["debug", "info", "warning"],
        help="console log level (default: warning)",
    )
    parser.add_argument(
        "--log-file", type=Path, default=log_file, help="also write JSON-lines events here"
    )


def _global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept --log-level and --log-file after any subcommand too (``kneepoint tune X
    --log-level info``), not only before it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _add_global_options(sub, defaults=False)
                _global_options_everywhere(sub)


def _sim_serve(args: argparse.Namespace) -> int:
    from kneepoint.sim import build_server, serve

    # vLLM-style startup lines at vLLM's own level (info), plain off a terminal as every other
    # command's: the launcher that reads this log takes each line's message after its level
    # (probes.server_failure); JSON lines here read as raw JSON in a person's piped log.
    configure_logging(level="info", log_file=args.log_file)
    serve_args = resolve_serve_args(args, args.unknown)
    if (problem := bind_problem(serve_args.host, serve_args.port)) is not None:
        print(f"kneepoint: --port {problem}", file=sys.stderr)  # "address already in use"
        return EXIT_BAD_INPUT
    # A refusal (EngineRefusedError, UnmodeledSettingError) exits 1, as vLLM's does.
    server = build_server(serve_args, serve_args.efficiency)
    serve(server, args.api_key or os.environ.get("VLLM_API_KEY") or None)  # as vLLM reads it
    return EXIT_OK


def _config_check(args: argparse.Namespace) -> int:
    from kneepoint.tune import study_checks

    now = datetime.now().astimezone()
    study = load_study(args.file, args.overrides, study_checks(now))
    resolved = study.model_dump(mode="json")
    log.info("config.checked", file=str(args.file), study=study.name, overrides=args.overrides)
    if args.json:
        sys.stdout.write(json.dumps(resolved, indent=2) + "\n")
    else:
        sys.stdout.write(f"# {args.file}: valid; resolved study with every default\n")
        sys.stdout.write(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True))
        deadline = study.budget.deadline_after(now)
        if deadline is not None:
            sys.stdout.write(
                f"# budget.deadline: a run started now stops starting new work "
                f"at {deadline.isoformat(timespec='minutes')}\n"
            )
    return EXIT_OK


def _config_schema(args: argparse.Namespace) -> int:
    text = json.dumps(study_file_schema(), indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        check_output("--output", args.output)
        write_atomically(args.output, text)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "takes_unknown", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.unknown = unknown
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """The command, and what ends it said in lines with the exit status it means: the command
    line's one ``except`` (kneepoint.records.errors draws what reaches it)."""
    # The simulated server handles its own signals; every other command may hold a server,
    # and SIGTERM and SIGHUP (a scheduler's stop, a closed terminal) unwind like Ctrl-C, so it
    # is stopped with its whole process group rather than orphaned.
    guard = nullcontext() if args.command == "sim" else unwinding()
    one_blas_thread()
    try:
        with guard:
            if args.log_file is not None:
                check_output("--log-file", args.log_file)
            configure_logging(level=args.log_level, log_file=args.log_file, flag="--log-file")
            code: int = args.handler(args)
    except KeyboardInterrupt as exc:
        print(f"kneepoint: interrupted{said_after(exc)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KneepointError as exc:
        lines = exc.lines()
        if lines:
            lines[-1] += said_after(exc)
        for line in lines:
            print(f"kneepoint: {line}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        # The OS refused an operation on a named file mid-run (disk full, permissions changed,
        # a path removed under the run): the run failed, said in one line. A full disk says so
        # whatever the call (a write names no file); any other OSError without a file is not
        # this, and keeps its traceback.
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if exc.filename is None and not full:
            raise
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"kneepoint: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_RUN_FAILED
    return code


if __name__ == "__main__":
    sys.exit(main())
