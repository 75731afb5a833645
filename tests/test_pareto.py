"""The report's Pareto view: every measured configuration's load points as speed per user
against throughput per GPU, the frontier, the winner marked (kneepoint.report.pareto)."""

from __future__ import annotations

from kneepoint.report.data import gather
from kneepoint.report.pareto import ParetoPoint, frontier, pareto_points
from kneepoint.run.folder import RunFolder

from .conftest import TuneRun


def test_the_frontier_keeps_the_points_nothing_beats_on_both_axes() -> None:
    points = [ParetoPoint("start", 1.0, 100.0, 500.0), ParetoPoint("start", 2.0, 60.0, 900.0),
              ParetoPoint("winner", 2.0, 90.0, 1200.0), ParetoPoint("trial 1", 4.0, 40.0, 1100.0),
              ParetoPoint("winner", 4.0, 50.0, 1500.0)]  # fmt: skip
    edge = frontier(points)
    assert [(p.per_user_tok_s, p.per_gpu_tok_s) for p in edge] == [
        (100.0, 500.0), (90.0, 1200.0), (50.0, 1500.0)]  # fmt: skip


def test_the_report_plots_every_measured_configuration(fp8_run: TuneRun) -> None:
    data = gather(RunFolder(fp8_run.folder))
    points = pareto_points(data)
    labels = {p.label for p in points}
    assert {"start", "winner"} <= labels  # the one trial was promoted: it is the winner
    # More users on a GPU make each slower: across the start's points, the one that delivers
    # the most per GPU is not the fastest per user.
    start = [p for p in points if p.label == "start"]
    assert max(start, key=lambda p: p.per_gpu_tok_s) != max(start, key=lambda p: p.per_user_tok_s)
    report = (fp8_run.folder / "report.md").read_text()
    assert "## Speed per user against throughput per GPU" in report
    # fp8 weights on a compute-bound server: the winner holds the frontier's high end.
    edge = frontier(points)
    assert max(edge, key=lambda p: p.per_gpu_tok_s).label == "winner"
    assert (fp8_run.folder / "plots" / "pareto.png").is_file()


def test_a_point_past_the_slo_never_joins_the_frontier() -> None:
    """A point that misses the SLO (its goodput 60% of what it was offered) held the frontier's
    high end and sized fleets on it (issue "Step 13")."""
    met = ParetoPoint("start", 2.0, 60.0, 900.0)
    missed = ParetoPoint("start", 4.0, 55.0, 1400.0, meets_slo=False)
    assert frontier([met, missed]) == [met]
