"""The report's word on the node: how the winner fills the study's GPUs with data-parallel
replicas (``kneepoint.load.node``), and what that serves beside the start."""

from __future__ import annotations

from kneepoint.load import node_replicas
from kneepoint.report.data import ReportData


def node_item(data: ReportData) -> str | None:
    """A summary line where the command runs the winner as several replicas."""
    state, study = data.state, data.study
    winner = data.final or data.start
    if state.incumbent is None or data.start is None or winner is None:
        return None
    replicas = node_replicas(study, state.incumbent)
    each, width = winner.result.capacity_rps, state.incumbent.gpu_count
    if replicas < 2 or each is None:
        return None
    start = data.start.result
    started = (
        f"; the start served {start.capacity_rps:.2f} req/s on {start.config.gpu_count} GPU(s)"
        if start.capacity_rps is not None
        else ""
    )
    return (
        f"On the study's {study.gpus} GPUs the winner runs as {replicas} data-parallel "
        f"replicas of {width} GPU(s) each (`--data-parallel-size {replicas}` in the command): "
        f"one measured {each:.2f} req/s, so the node serves about {replicas * each:.1f} req/s "
        f"where vLLM's balancer splits the load evenly (the simulator's loses about 5% at 8 "
        f"replicas){started}."
    )
