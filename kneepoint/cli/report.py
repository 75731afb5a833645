"""``kneepoint report RUN``: (re)write a run folder's report, Markdown and HTML with plots.

Works on a finished run and on one still going or killed (it reports what the ledger holds).
It takes no lock on the folder: it only reads the ledger (reading changes nothing, and a line
the agent is still writing is left out) and writes each report file whole, so it runs beside a
live agent; a shared lock would refuse exactly that, the report of a run in progress.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def add_report_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = commands.add_parser("report", help="write a run folder's report (Markdown + HTML)")
    report.add_argument("run", type=Path, help="the run folder (runs/<study>-<timestamp>)")
    report.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    from kneepoint.report import write_report
    from kneepoint.run import RunFolder

    markdown, html = write_report(RunFolder.existing(args.run))
    log.info("report.written", markdown=str(markdown), html=str(html))
    sys.stdout.write(f"{markdown}\n{html}\n")
    return 0
