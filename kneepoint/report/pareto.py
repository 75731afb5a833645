"""The report's Pareto view: every load point of every configuration the run measured, as the
speed one user sees (output tokens per second of one stream: one over the mean time per
output token) against what a GPU delivers (output tokens per second, over the replica's
GPUs), the frontier no point beats on both, and the winner marked.

It is the trade-off a deployment chooses on: more users on a GPU make each one slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from kneepoint.records import EngineConfig, SweepResult
from kneepoint.report import plots
from kneepoint.report.data import ReportData
from kneepoint.report.document import Document, Heading, Image, Paragraph


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    """One load point of one configuration."""

    label: str
    """``start``, ``trial N`` or ``winner``."""
    rate_rps: float
    per_user_tok_s: float
    per_gpu_tok_s: float
    meets_slo: bool = True
    """A point past the SLO is drawn but is no operating point: it never joins the frontier,
    whose high end it would otherwise hold."""


def _points(label: str, result: SweepResult | None, config: EngineConfig) -> list[ParetoPoint]:
    if result is None:
        return []
    gpus = config.gpu_count
    found = []
    for entry in result.points:
        point = entry.point
        tpots = [
            (d["tpot"].mean_ms, d["tpot"].count)
            for d in point.dists.values()
            if "tpot" in d and 0 < d["tpot"].mean_ms < math.inf
        ]
        if not entry.counted or not point.output_tokens_per_s or not tpots:
            continue
        weight = sum(n for _, n in tpots)
        if not weight:
            continue
        tpot_ms = sum(m * n for m, n in tpots) / weight
        found.append(
            ParetoPoint(
                label,
                entry.rate_rps,
                1000.0 / tpot_ms,
                point.output_tokens_per_s / gpus,
                point.meets_slo,
            )
        )
    return found


def pareto_points(data: ReportData) -> list[ParetoPoint]:
    """Every measured configuration's valid load points: the start's (its knee search and
    repeats), each trial's (its screen and its validation repeats), the winner's."""
    study, state, found = data.study, data.state, []
    if state.baseline is not None:
        base = state.baseline
        found = _points("start", base.knee, base.config) + _points(
            "start", base.repeats, base.config
        )
    winner = state.incumbent.fingerprint() if state.promotions and state.incumbent else None
    for trial in data.trials:
        config = trial.proposal.config
        label = "winner" if config.fingerprint() == winner else f"trial {trial.trial}"
        found += _points(label, trial.screened.sweep if trial.screened else None, config)
        found += _points(label, trial.validated.challenger if trial.validated else None, config)
    if state.promotions:
        found += _points("winner", state.promotions[-1].repeats, state.incumbent or study.engine)
    return list(dict.fromkeys(found))  # a promotion's repeats are its validation's


def frontier(points: list[ParetoPoint]) -> list[ParetoPoint]:
    """The points that meet the SLO and that no other such point beats on both axes, fastest
    per user first."""
    best: list[ParetoPoint] = []
    meeting = (p for p in points if p.meets_slo)
    for p in sorted(meeting, key=lambda p: (-p.per_user_tok_s, -p.per_gpu_tok_s)):
        if not best or p.per_gpu_tok_s > best[-1].per_gpu_tok_s:
            best.append(p)
    return best


def plot(
    points: list[ParetoPoint], edge: list[ParetoPoint], path: Path, device: str = "GPU"
) -> Path:
    fig = plots.figure((6, 4.2))
    ax = fig.subplots()
    others = [p for p in points if p.label != "winner"]
    ax.scatter(
        [p.per_user_tok_s for p in others],
        [p.per_gpu_tok_s for p in others],
        s=12,
        color="#aaaaaa",
        label="measured configurations",
    )
    won = [p for p in points if p.label == "winner"]
    if won:
        ax.scatter(
            [p.per_user_tok_s for p in won],
            [p.per_gpu_tok_s for p in won],
            s=28,
            color="#1f77b4",
            marker="*",
            label="winner",
        )
    ax.plot(
        [p.per_user_tok_s for p in edge],
        [p.per_gpu_tok_s for p in edge],
        "-",
        color="#d62728",
        lw=1,
        label="Pareto frontier",
    )
    ax.set(
        xlabel="output tok/s per user",
        ylabel=f"output tok/s per {device}",
        title=f"speed per user vs throughput per {device}",
    )
    ax.legend(fontsize=8)
    return plots.save(fig, path)


def section(data: ReportData, doc: Document, out: Path) -> None:
    points = pareto_points(data)
    if not points:
        return
    edge = frontier(points)
    configs = len({p.label for p in points})
    on_edge = sum(p.label == "winner" for p in edge)
    device = data.study.gpu.kind
    doc.add(
        Heading(f"Speed per user against throughput per {device}"),
        Paragraph(
            f"{len(points)} load points of {configs} measured configurations; "
            f"{len(edge)} on the Pareto frontier, {on_edge} of them the winner's. "
            "The frontier joins only points that meet the SLO."
        ),
        Image(
            plot(points, edge, out / "pareto.png", device),
            f"output tok/s per user against output tok/s per {device}",
        ),
    )
