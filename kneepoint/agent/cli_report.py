"""``kneepoint report RUN``: (re)write a run folder's report, Markdown and HTML with plots.

Works on a finished run and on one still going or killed (it reports what the ledger holds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kneepoint.agent.report import write_report
from kneepoint.agent.run_folder import RunFolder, RunFolderError
from kneepoint.config import ConfigError, Problem


def add_report_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = commands.add_parser("report", help="write a run folder's report (Markdown + HTML)")
    report.add_argument("run", type=Path, help="the run folder (runs/<study>-<timestamp>)")
    report.set_defaults(run=run_report)


def run_report(args: argparse.Namespace) -> int:
    try:
        folder = RunFolder.existing(args.run)
    except RunFolderError as exc:
        raise ConfigError([Problem(str(args.run), None, (), str(exc))]) from exc
    markdown, html = write_report(folder)
    sys.stdout.write(f"{markdown}\n{html}\n")
    return 0
