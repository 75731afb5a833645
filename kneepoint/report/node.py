"""The report's word on the node: how the winner fills the study's GPUs with data-parallel
replicas (``kneepoint.load.node``), and what that serves beside the start."""

from __future__ import annotations

from kneepoint.load.node import node_replicas
from kneepoint.report.data import ReportData


def node_item(data: ReportData) -> str | None:
    """A summary line where the command runs the winner as several replicas."""
    state, study = data.state, data.study
    if state.incumbent is None or state.baseline is None:
        return None
    replicas = node_replicas(study, state.incumbent)
    last = state.promotions[-1].repeats if state.promotions else state.baseline.repeats
    if replicas < 2 or last.capacity_rps is None:
        return None
    each, width = last.capacity_rps, state.incumbent.gpu_count
    start = state.baseline.repeats
    started = (
        f"; the start served {start.capacity_rps:.2f} req/s on {start.config.gpu_count} GPU(s)"
        if start.capacity_rps is not None
        else ""
    )
    return (
        f"On the study's {study.gpus} GPUs the winner runs as {replicas} data-parallel "
        f"replicas of {width} GPU(s) each (`--data-parallel-size {replicas}` in the command): "
        f"one measured {each:.2f} req/s, so the node serves about {replicas * each:.1f} req/s "
        f"where vLLM's balancer splits the load evenly (the simulator's loses about 3% at 8 "
        f"replicas){started}."
    )
