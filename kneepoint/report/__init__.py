"""``kneepoint report``: a run folder's report, as Markdown and as one self-contained HTML page
with PNG plots (written into the run folder)."""

from kneepoint.report.diagnosis_document import findings_document
from kneepoint.report.document import to_markdown
from kneepoint.report.intervals import TRIM, slo_intervals
from kneepoint.report.plan_report import plan_document
from kneepoint.report.speculation import probe_words
from kneepoint.report.write import write_report

__all__ = [
    "TRIM",
    "findings_document",
    "plan_document",
    "probe_words",
    "slo_intervals",
    "to_markdown",
    "write_report",
]
