"""The report's fleet section: for the start and the winner, the replicas and GPUs the study's
peak rate needs, their price an hour and per million output tokens, and the utilisation that
implies; the saving in dollars between them (``kneepoint.load.fleet``)."""

from __future__ import annotations

from kneepoint.load import FleetSize, gpu_price, output_per_request, size_fleet
from kneepoint.records import EngineConfig
from kneepoint.report.data import Curve, ReportData
from kneepoint.report.document import Document, Heading, Paragraph, Table


def _size(data: ReportData, curve: Curve, config: EngineConfig) -> FleetSize | None:
    capacity = curve.result.capacity_low_rps or curve.result.capacity_rps
    if not capacity:
        return None
    study = data.study
    tokens = output_per_request(curve.result, study.workload)
    return size_fleet(
        capacity,
        config.gpu_count,
        tokens,
        study.fleet,
        gpu_price(study, study.gpu, {}),
    )


def _money(value: float | None, digits: int = 2) -> str:
    return "no price" if value is None else f"${value:,.{digits}f}"


def _row(label: str, size: FleetSize) -> list[str]:
    return [
        label,
        f"{size.capacity_rps:.2f}",
        "-" if size.replicas is None else str(size.replicas),
        "-" if size.gpus is None else str(size.gpus),
        _money(size.usd_per_hour),
        _money(size.usd_per_million_output, 3),
        f"{size.utilisation:.0%}",
    ]


def fleet(data: ReportData, doc: Document) -> None:
    """The section, where the start (and the winner) have an SLO capacity and run on GPUs
    (a CPU host has no GPU-hour price to size a fleet by)."""
    study, spec = data.study, data.study.fleet
    if study.gpu.is_cpu:
        return
    sized = [
        (label, size)
        for label, curve, config in (
            ("start", data.start, study.engine),
            ("winner", data.final, data.state.incumbent or study.engine),
        )
        if curve is not None and (size := _size(data, curve, config)) is not None
    ]
    if not sized:
        return
    price = gpu_price(study, study.gpu, {})
    own = study.budget.price_per_gpu_hour_usd is not None
    where = "the study's" if own else "the GPU catalogue's typical on-demand"
    priced = (
        f"at {where} ${price:.2f} per GPU-hour"
        if price is not None
        else f"without a price (set budget.price_per_gpu_hour_usd: the catalogue has none "
        f"for {study.gpu.name})"
    )
    if spec.peak_rps is None:
        scope = (
            "One replica at its SLO capacity's lower end, run at "
            f"{1 - spec.headroom:.0%} of it (set fleet.peak_rps to size a fleet)"
        )
    else:
        scope = (
            f"A peak of {spec.peak_rps:g} req/s with {spec.headroom:.0%} headroom on each "
            f"replica's SLO capacity (its interval's lower end), tokens paid for at the "
            f"average rate, peak / {spec.peak_to_average:g}"
        )
    doc.add(
        Heading("Fleet and price"),
        Paragraph(f"{scope}, {priced}."),
        Table(
            [
                "config",
                "capacity req/s",
                "replicas",
                "GPUs",
                "$ / hour",
                "$ / 1M output tokens",
                "utilisation",
            ],
            [_row(label, size) for label, size in sized],
        ),
    )
    if len(sized) == 2:
        doc.add(Paragraph(saving(sized[0][1], sized[1][1])))


def _difference(amount: float, digits: int = 2) -> str:
    """``$x less`` or ``$x more`` (the winner against the start)."""
    return f"{_money(abs(amount), digits)} {'less' if amount >= 0 else 'more'}"


def saving(start: FleetSize, winner: FleetSize) -> str:
    """What the winner saves over the start, in dollars (or what it costs more)."""
    if start.usd_per_hour is None or winner.usd_per_hour is None:
        return "No price, so no saving in dollars."
    if start.replicas is None or start.gpus == winner.gpus:
        won, began = winner.usd_per_million_output or 0.0, start.usd_per_million_output or 0.0
        gpus = "" if start.gpus is None else f"The same {start.gpus} GPUs; "
        return (
            f"{gpus}{'p' if gpus else 'P'}er million output tokens the winner costs "
            f"{_money(won, 3)} against {_money(began, 3)}: "
            f"{_difference(began - won, 3)}."
        )
    hourly = start.usd_per_hour - winner.usd_per_hour
    return (
        f"The winner needs {winner.gpus} GPUs where the start needs {start.gpus}: "
        f"{_difference(hourly)} an hour, {_difference(hourly * 24 * 365, 0)} a year."
    )
