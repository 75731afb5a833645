"""The report says what it measured without contradicting itself: the SLO at the top with one
definition of "meets SLO" (and goodput beside it), a repeat that missed named in its row, and
"not quality-checked" wherever an output-changing knob went through without a check."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

from matplotlib.figure import Figure

from kneepoint.cli.main import main
from kneepoint.records.ledger import QualityChecked
from kneepoint.records.measure import Dist
from kneepoint.report.data import CurvePoint, curve
from kneepoint.report.document import Code, Document, Table, to_html
from kneepoint.report.measured import DEFINITIONS, _value
from kneepoint.report.plots import plain_log_y
from kneepoint.run.folder import RunFolder
from kneepoint.run.ledger import Ledger
from kneepoint.run.state import RunState
from tests.support.chromium import HEADLESS, chromium

from .conftest import SMALL, TuneRun, kneepoint_main


def test_a_skipped_quality_check_is_recorded_as_skipped(fp8_run: TuneRun) -> None:
    events = Ledger(fp8_run.folder / "ledger.jsonl").read()
    [checked] = [e for e in events if isinstance(e, QualityChecked)]
    assert checked.verdict == "skipped" and "simulator has no real model outputs" in checked.reason
    state = RunState.replay(events)
    assert state.promotions and state.trials[checked.trial].unchecked_quality


def test_the_report_says_not_quality_checked_in_the_summary_and_the_trial(
    fp8_run: TuneRun,
) -> None:
    report = (fp8_run.folder / "report.md").read_text()
    summary = report.split("## Summary", 1)[1].split("## What binds", 1)[0]
    assert "Not quality-checked: trial 1" in summary
    assert "Recommended command (not quality-checked: see above):" in summary
    trials = report.split("## Trials", 1)[1].split("##", 1)[0]
    assert "promoted, not quality-checked" in trials


def test_the_slo_and_its_definitions_come_first(fp8_run: TuneRun) -> None:
    report = (fp8_run.folder / "report.md").read_text()
    slo = report.index("## Service-level objective")
    assert slo < report.index("## Summary")
    assert "- summarise: TTFT p99 <= 2000 ms" in report[slo:]
    for definition in DEFINITIONS:
        assert definition in report
    assert "meets SLO" in report and "goodput req/s (of offered)" in report


def test_a_repeat_that_missed_is_named_in_its_row(fp8_run: TuneRun) -> None:
    folder = RunFolder(fp8_run.folder)
    state = RunState.replay(folder.ledger.read())
    assert state.baseline is not None
    result = state.baseline.repeats
    # Make the second repeat of the lowest rate miss, as one noisy repeat does.
    first = min(result.points, key=lambda p: (p.rate_rps, -p.repeat))
    missed = first.point.model_copy(
        update={"meets_slo": False, "violations": ("chat itl_p95 53 ms > 50 ms",)}
    )
    points = tuple(p.model_copy(update={"point": missed}) if p is first else p
                   for p in result.points)  # fmt: skip
    rows = curve(folder.study(), "start", result.model_copy(update={"points": points})).points
    row = rows[0]
    assert not row.meets_slo and row.repeats >= 2
    assert row.misses == (f"r{first.repeat}: chat itl_p95 53 ms > 50 ms",)
    assert all(r.meets_slo for r in rows[1:3])


def test_a_long_command_wraps_instead_of_widening_the_page(tmp_path: Path) -> None:
    # A launch command with a venv path and twenty flags used to run off a 1400 px window.
    doc = Document("wide")
    doc.add(Code("/opt/venvs/vllm/bin/python -m vllm.entrypoints.cli.main serve "
                 + " ".join(f"--flag-number-{i} value-{i}" for i in range(40))),
            Table(["signal", "reading"], [["x", "y" * 400]]))  # fmt: skip
    probe = (
        "<script>document.title = document.documentElement.scrollWidth <= innerWidth "
        "? 'fits' : 'overflows';</script></body>"
    )
    page = tmp_path / "page.html"
    page.write_text(to_html(doc).replace("</body>", probe))
    argv = [chromium(), *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,900", "--dump-dom", page.as_uri()]  # fmt: skip
    dom = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120).stdout
    assert "<title>fits</title>" in dom


def test_latency_axes_are_labelled_in_plain_numbers() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2, 3], [22.0, 31.0, 47.0])  # an ITL curve inside one decade
    plain_log_y(ax)
    fig.savefig(io.BytesIO(), format="png")
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    assert labels and all(text.replace(".", "").isdigit() for text in labels), labels


def test_a_percentile_from_too_few_samples_is_flagged() -> None:
    # A p99 from fewer than 100 requests is the sample's maximum, or close to it.
    small = Dist(count=60, mean_ms=50, p50_ms=40, p90_ms=70, p95_ms=80, p99_ms=95)
    assert small.resolves(95) and not small.resolves(99)
    assert Dist(count=100, mean_ms=1, p50_ms=1, p90_ms=1, p95_ms=1, p99_ms=1).resolves(99)
    point = CurvePoint(8.0, {"chat ttft_p99": 95.0, "chat itl_p95": 20.0}, 8.0, 1, (),
                       {"chat ttft_p99": 60})  # fmt: skip
    assert _value(point, "chat ttft_p99") == "95.0 (only 60 samples: near the maximum)"
    assert _value(point, "chat itl_p95") == "20.0"


def test_a_run_that_promoted_nothing_offers_the_start_as_kept_not_as_a_winner(
    tmp_path: Path,
) -> None:
    # One trial, async scheduling off: screened +0.8%, under the 3% minimum effect.
    one = ["--set", "budget.max_trials=1", "--set", "search.knobs=[async_scheduling]"]
    done = kneepoint_main("tune", SMALL, "--runs-dir", tmp_path, *one)
    assert done.returncode == 0, done.stderr[-2000:]
    (folder,) = tmp_path.iterdir()
    report = (folder / "report.md").read_text()
    assert "Recommended command" not in report
    assert "Starting command, kept (no trial was promoted):" in report
    assert "serve the winner" not in done.stdout
    assert "no trial was promoted: keep serving the starting configuration:" in done.stdout
    assert (folder / "best-command.txt").read_text().startswith("vllm serve")


def test_a_run_whose_every_rate_missed_the_slo_recommends_no_command(tmp_path: Path) -> None:
    # A TTFT limit under the 59 ms its lowest rate measured: nothing met it.
    args = ["tune", str(SMALL), "--runs-dir", str(tmp_path), "--set", "slo.default.ttft_p99_ms=20"]
    assert main(args) == 1
    (folder,) = tmp_path.iterdir()
    report = (folder / "report.md").read_text()
    assert "Recommended command" not in report
    assert "Starting command (no rate met the SLO, so none is recommended):" in report


def test_the_evidence_shares_sum_to_the_whole_the_verdict_first(small_run: TuneRun) -> None:
    """Each stage's shares of the evidence sum to 100% (its weights, overlapping shares of
    the wall time, summed to 129% printed as they were), the binding constraint's first."""
    report = (small_run.folder / "report.md").read_text()
    found = re.findall(r"\n(\w+)[^\n]*?-bound, [^\n]*Share of the evidence: ([^.]*)\.", report)
    assert found, report[:2000]
    for binding, shares in found:
        named = [part.rsplit(" ", 1) for part in shares.split(", ")]
        percents = [int(percent.rstrip("%")) for _, percent in named]
        assert abs(sum(percents) - 100) <= len(percents), shares  # each rounded once
        assert named[0][0] == binding and percents == sorted(percents, reverse=True), shares
