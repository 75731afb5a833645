"""A calibration: the simulator's constants fitted to one real engine's recorded sweeps, for
one (GPU, model shape, vLLM version), with how well the fit matched what it was fitted to.
A study that names one (``calibration: FILE``) simulates, and prices its predictions, with it.
"""

from __future__ import annotations

from pydantic import Field

from kneepoint.records.base import InputRecord
from kneepoint.records.efficiency import Efficiency


class ReplayScore(InputRecord):
    """One recording replayed with the built-in constants and with a calibration's."""

    recording: str
    fitted: bool
    """Whether the calibration was fitted to it (in sample) or held out of the fit."""
    capacity_rps: float | None = Field(default=None, ge=0.0)
    """The real engine's SLO capacity."""
    uncalibrated_error_rel: float | None = None
    calibrated_error_rel: float | None = None
    """Simulated SLO capacity over the real one, less 1 (None where either found none)."""
    uncalibrated_step_error_rel: float | None = Field(default=None, ge=0.0)
    calibrated_step_error_rel: float | None = Field(default=None, ge=0.0)
    """Root mean squared log error of its busy points' step times (None: it has none)."""


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
    scores: tuple[ReplayScore, ...] = ()
    """Recordings replayed with and without it, those it was fitted to and those held out
    (``kneepoint calibrate --hold-out``): what it is worth beyond what it saw."""
