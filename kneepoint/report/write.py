"""Writing a run folder's report: report.md and report.html, with the points' intervals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kneepoint.report.data import ReportData, gather
from kneepoint.report.document import to_html, to_markdown
from kneepoint.report.intervals import kept_points, with_intervals
from kneepoint.report.sections import build
from kneepoint.run import RunFolder, write_atomically


def write_report(folder: RunFolder) -> tuple[Path, Path]:
    """Write report.md and report.html into the run folder; returns their paths."""
    doc = build(_with_intervals(gather(folder)))
    markdown, html = folder.path / "report.md", folder.path / "report.html"
    write_atomically(markdown, to_markdown(doc, folder.path))
    write_atomically(html, to_html(doc))
    return markdown, html


def _with_intervals(data: ReportData) -> ReportData:
    confidence, kept = data.study.tuning.confidence, kept_points(data.folder.path)
    start, final = (
        None if c is None else with_intervals(kept, data.study, c, confidence)
        for c in (data.start, data.final)
    )
    return dataclasses.replace(data, start=start, final=final)
