"""The report's figures, drawn with matplotlib into PNG files in the run's plots/ folder:
latency against offered load with the SLOs and knees marked, goodput against load, the signals
at the knee, and predicted against measured gains."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from kneepoint.report.data import Curve, ReportData, slo_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_COLOURS = {"start": "#888888", "winner": "#1f77b4"}
_SIGNALS = (
    ("kv_usage_mean", "KV usage", 100.0),
    ("gpu_util_pct", "GPU util", 1.0),
    ("sm_util_pct", "SM active", 1.0),
    ("tensor_util_pct", "tensor active", 1.0),
    ("dram_bw_util_pct", "DRAM bandwidth", 1.0),
)


def figure(figsize: tuple[float, float]) -> Figure:
    """A new figure of the object API, which draws straight to files (Agg): no pyplot state,
    no display needed. matplotlib is imported here, when a report draws, not with this module:
    the report's package is imported by every command (sweep and diagnose for its words, tune
    for its steps), and matplotlib is 0.3 s of a command's 1 s start."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def plain_log_y(ax: Axes) -> None:
    """A log y axis labelled in plain numbers: by default a range under one decade (an ITL
    between 20 and 50 ms) is labelled 3x10^1, 4x10^1."""
    from matplotlib.ticker import LogFormatter  # with the figure it formats (see figure())

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))


def save(fig: Figure, path: Path) -> Path:
    """Write a figure as a PNG (its folder made if missing), laid out, at the report's dpi."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _curves(data: ReportData) -> list[Curve]:
    """The start's and the winner's curves that have a counted point to draw (a run whose
    points all could not tell draws none, and says so in its text)."""
    return [c for c in (data.start, data.final) if c is not None and c.points]


def latency_curves(data: ReportData, out: Path) -> Path | None:
    metrics = slo_metrics(data.study)
    curves = _curves(data)
    if not metrics or not curves:
        return None
    fig = figure((5.2 * len(metrics), 3.8))
    axes = fig.subplots(1, len(metrics), squeeze=False)
    for ax, (label, _, _, limit) in zip(axes[0], metrics, strict=True):
        for c in curves:
            rates = [p.rate_rps for p in c.points]
            values = [p.values_ms[label] for p in c.points]
            shown = [(r, v) for r, v in zip(rates, values, strict=True) if math.isfinite(v)]
            colour = _COLOURS[c.label]
            if shown:
                ax.plot(*zip(*shown, strict=True), "o-", color=colour, label=c.label, ms=3)
            if c.result.capacity_rps:
                ax.axvline(c.result.capacity_rps, color=colour, ls=":", lw=1.2)
        ax.axhline(limit, color="#d62728", ls="--", lw=1, label=f"SLO {limit:g} ms")
        plain_log_y(ax)
        ax.set(title=label, xlabel="offered rate (req/s)", ylabel="ms")
        ax.legend(fontsize=8)
    return save(fig, out / "latency-vs-load.png")


def goodput_curves(data: ReportData, out: Path) -> Path | None:
    curves = _curves(data)
    if not curves:
        return None
    fig = figure((6, 3.8))
    ax = fig.subplots()
    top = max(p.rate_rps for c in curves for p in c.points)
    ax.plot([0, top], [0, top], color="#cccccc", lw=1, label="goodput = offered")
    for c in curves:
        ax.plot(
            [p.rate_rps for p in c.points],
            [p.goodput_rps for p in c.points],
            "o-",
            color=_COLOURS[c.label],
            ms=3,
            label=c.label,
        )
        if c.result.capacity_rps:
            ax.axvline(c.result.capacity_rps, color=_COLOURS[c.label], ls=":", lw=1.2)
    ax.set(xlabel="offered rate (req/s)", ylabel="goodput (req/s)", title="goodput vs load")
    ax.legend(fontsize=8)
    return save(fig, out / "goodput-vs-load.png")


def knee_signals(data: ReportData, out: Path) -> Path | None:
    rows = []
    for c in _curves(data):
        point = data.knee_point(c)
        if point is not None:
            rows.append((c.label, point.signals))
    if not rows:
        return None
    fig = figure((7, 3.6))
    ax = fig.subplots()
    width = 0.8 / len(rows)
    for i, (label, signals) in enumerate(rows):
        values = [(getattr(signals, f) or 0.0) * scale for f, _, scale in _SIGNALS]
        xs = [j + i * width for j in range(len(_SIGNALS))]
        ax.bar(xs, values, width, color=_COLOURS[label], label=label)
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(_SIGNALS))])
    ax.set_xticklabels([name for _, name, _ in _SIGNALS], fontsize=8)
    ax.set(ylim=(0, 105), ylabel="% (missing: 0)", title="signals just past the knee")
    ax.legend(fontsize=8)
    return save(fig, out / "signals-at-knee.png")


def predictions(data: ReportData, out: Path) -> Path | None:
    pairs = []
    for trial in data.trials:
        measured = trial.measured_ratio()
        if measured is not None:
            pairs.append((trial.proposal.prediction.capacity_ratio, measured, trial.trial))
    if not pairs:
        return None
    fig = figure((5, 4))
    ax = fig.subplots()
    top = max(max(p, m) for p, m, _ in pairs) * 1.1
    ax.plot([0, top], [0, top], color="#cccccc", lw=1)
    ax.scatter([p for p, _, _ in pairs], [m for _, m, _ in pairs], color="#1f77b4")
    for p, m, n in pairs:
        ax.annotate(str(n), (p, m), fontsize=8, xytext=(3, 3), textcoords="offset points")
    ax.set(
        xlabel="predicted ratio",
        ylabel="measured ratio (vs the incumbent then)",
        title="predictions vs results",
        xlim=(0, top),
        ylim=(0, top),
    )
    return save(fig, out / "predictions.png")
