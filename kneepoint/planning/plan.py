"""A whole plan: for each GPU kind, every tensor-parallel layout's memory plan (or why it is
not laid out, or vLLM's refusal), and for those that start, the simulator's knee, SLO capacity
and price; sized for the study's request lengths."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kneepoint.config import workload_trace
from kneepoint.load import gpu_price
from kneepoint.planning.layouts import layout, shapes, sized_engine
from kneepoint.planning.lengths import request_lengths
from kneepoint.planning.predict import predict, study_on
from kneepoint.records import GpuSpec, Layout, Plan, PlanLengths, StudySpec

NEXT_SIZE_START = 1.4
Progress = Callable[[Layout], None]
"""Told of each layout as it is planned (the console's progress)."""


def plan_lengths(study: StudySpec) -> PlanLengths:
    return request_lengths(study.workload, workload_trace(study.workload), study.seed)


def make_plan(
    study: StudySpec,
    gpus: Sequence[GpuSpec],
    gpus_per_node: int,
    prices: Mapping[str, float],
    progress: Progress | None = None,
) -> Plan:
    """Every layout of the study's model on each of ``gpus``, those that start predicted."""
    lengths = plan_lengths(study)
    laid: list[Layout] = []
    for gpu in gpus:
        start = study.tuning.start_rps
        for shape in shapes(study.model, gpus_per_node):
            lay = layout(gpu, study.model, study.engine, shape, gpus=gpus_per_node, lengths=lengths)
            if lay.fits:
                config = sized_engine(study.engine, shape, lengths)
                prediction = predict(
                    study_on(study, gpu, config), gpu_price(study, gpu, prices), start
                )
                lay = lay.model_copy(update={"prediction": prediction})
                # Doubling the GPUs raised the simulated 8B chat knee 1.4-1.8x (38 -> 70 ->
                # 115 -> 166 req/s): the next size's search starts 1.4x above this knee.
                if shape.dp == 1 and not shape.ep:
                    start = max(start, (prediction.knee_rps or 0.0) * NEXT_SIZE_START)
            laid.append(lay)
            if progress is not None:
                progress(lay)
    calibrated = study.calibration.gpu if study.calibration is not None else None
    return Plan(
        study=study.name,
        model=study.model.name,
        workload=study.workload.name,
        gpus_per_node=gpus_per_node,
        lengths=lengths,
        layouts=tuple(laid),
        calibrated_on=calibrated,
    )
