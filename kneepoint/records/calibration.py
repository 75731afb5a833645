"""A calibration: the simulator's constants fitted to one real engine's recorded sweeps, for
one (GPU, model shape, vLLM version), with how well the fit matched what it was fitted to.
A study that names one (``calibration: FILE``) simulates, and prices its predictions, with it.
"""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import InputRecord
from kneepoint.records.efficiency import Efficiency


class Calibration(InputRecord):
    gpu: str
    """The GPU catalogue entry the recordings ran on."""
    model: str
    """The model (catalogue name or config.json) the recordings served."""
    vllm_version: str | None = None
    efficiency: Efficiency
    fitted_from: tuple[str, ...] = ()
    """The recordings (sweep.json paths) it was fitted to."""
    step_error_rel: float = Field(ge=0.0)
    """Root mean squared log error of the fitted step times (0.06: about 6%)."""
    ttft_error_ms: float | None = None
    """Mean absolute error of TTFT p50 at the recordings' lowest rates, after the fit."""
