"""How close real kernels come to a GPU's peaks, and the fixed costs around them: the constants
the roofline prices a step with. The defaults come from public models of vLLM on an H100; a
calibration (``kneepoint calibrate``) fits them to a real engine's recorded sweeps."""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import InputRecord


class Efficiency(InputRecord):
    """Fractions of peak that real kernels reach, and fixed costs (public vLLM-on-H100 models)."""

    mfu: float = Field(default=0.5, gt=0.0, le=1.0)
    """GEMM fraction of tensor-core peak at typical chunk sizes."""
    weight_bandwidth: float = Field(default=0.78, gt=0.0, le=1.0)
    kv_bandwidth: float = Field(default=0.5, gt=0.0, le=1.0)
    smooth_max_power: float = Field(default=4.0, ge=1.0)
    """p of (compute^p + memory^p)^(1/p): large p is a hard max, 1 is no overlap."""
    step_overhead_s: float = Field(default=100e-6, ge=0.0)
    layer_overhead_graph_s: float = Field(default=30e-6, ge=0.0)
    layer_overhead_eager_s: float = Field(default=90e-6, ge=0.0)
    request_overhead_s: float = Field(default=3e-6, ge=0.0)
    allreduce_latency_s: float = Field(default=8e-6, ge=0.0)
    cpu_step_s: float = Field(default=300e-6, ge=0.0)
    """CPU-side scheduler and engine-core work per step."""
    cpu_request_s: float = Field(default=6e-6, ge=0.0)
    """CPU scheduling and bookkeeping per scheduled request."""
    cpu_chunk_s: float = Field(default=12e-6, ge=0.0)
    """Output processing per streamed chunk (detokenise, serialise, send)."""
