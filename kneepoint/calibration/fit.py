"""Fit the roofline's constants to the steps a real engine ran.

Every recorded load point says, from vLLM's own metrics, how many steps the engine ran per
second, how many tokens each carried (how many of them decodes), how many sequences ran and
how full the KV cache was: the average step's shape (``observed_shape``) and its wall time (one
over the step rate, while the engine steps back to back). The fit chooses the constants that
make the roofline's price of each observed shape match its measured time, in squared log
error, by Nelder-Mead over their plausible ranges (a handful of constants, tens of points:
a direct search needs no gradients and no extra dependency). fp8's GEMM speed-up is fitted
only where some recording ran fp8 weights, and kept at its default otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.physics.defaults import ResolvedEngine, resolve_engine
from kneepoint.physics.roofline import BatchShape, Roofline
from kneepoint.policies.step_estimate import observed_shape
from kneepoint.records.efficiency import Efficiency
from kneepoint.records.hardware import GpuSpec, ModelSpec

# The constants fitted and the ranges searched, around what public models of vLLM on
# H100-class GPUs use (REFERENCE.md: MFU 0.45-0.55, weights 0.73-0.8 of peak bandwidth, KV
# ~0.5, ~0.03 ms per layer of launch overhead). Step times alone trade GEMM speed against KV
# traffic (both grow with load), so the ranges stay within what real kernels reach.
BOUNDS: dict[str, tuple[float, float]] = {
    "mfu": (0.3, 0.75),
    "weight_bandwidth": (0.5, 0.92),
    "kv_bandwidth": (0.25, 0.9),
    "token_overhead_s": (0.0, 60e-6),
    "layer_overhead_graph_s": (0.0, 300e-6),
    "fp8_gemm_speedup": (1.0, 2.0),
}
# fp8_gemm_half_tokens is not fitted: steps of one workload span too few GEMM sizes to tell
# it from the speed-up itself.
MIN_RUNNING = 2.0
"""Below this many running sequences the engine idles between steps: its step rate is not
its step time."""


@dataclass(frozen=True, slots=True)
class StepSample:
    """One recorded point's average step and how long it took."""

    label: str
    shape: BatchShape
    observed_s: float
    gpu: GpuSpec
    model: ModelSpec
    engine: ResolvedEngine

    def predicted_s(self, efficiency: Efficiency) -> float:
        return Roofline(self.gpu, self.model, self.engine, efficiency).step(self.shape).wall_s


def step_samples(recordings: Sequence[RecordedSweep]) -> list[StepSample]:
    """The average steps of every valid, busy point of the recordings."""
    samples = []
    for rec in recordings:
        study = rec.study
        engine = resolve_engine(rec.result.config, study.gpu, study.model)
        for entry in sorted(rec.result.points, key=lambda p: (p.repeat, p.rate_rps)):
            signals = entry.point.signals
            found = observed_shape(signals, study.workload)
            if (found is None or not entry.point.valid or not signals.steps_per_s
                    or (signals.running_mean or 0.0) < MIN_RUNNING):  # fmt: skip
                continue
            samples.append(StepSample(f"{rec.name} @ {entry.rate_rps:g} req/s", found[0],
                                      1.0 / signals.steps_per_s, study.gpu, study.model,
                                      engine))  # fmt: skip
    return samples


def step_error(efficiency: Efficiency, samples: Sequence[StepSample]) -> float:
    """Root mean squared log error of the predicted step times (0.1 is about 10%)."""
    errors = [math.log(s.predicted_s(efficiency) / s.observed_s) for s in samples]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def fit_steps(samples: Sequence[StepSample], start: Efficiency | None = None) -> Efficiency:
    """The constants that price the observed steps best, starting from ``start``."""
    start = start or Efficiency()
    names = [n for n in BOUNDS if n != "fp8_gemm_speedup" or any(s.engine.fp8_compute
                                                                  for s in samples)]  # fmt: skip

    def unit(x: np.ndarray) -> Efficiency:
        clipped = np.clip(x, 0.0, 1.0)
        values = {n: BOUNDS[n][0] + (BOUNDS[n][1] - BOUNDS[n][0]) * float(v)
                  for n, v in zip(names, clipped, strict=True)}  # fmt: skip
        return start.model_copy(update=values)

    def cost(x: np.ndarray) -> float:
        return step_error(unit(x), samples)

    first = np.array([(getattr(start, n) - BOUNDS[n][0]) / (BOUNDS[n][1] - BOUNDS[n][0])
                      for n in names])  # fmt: skip
    best = _nelder_mead(cost, np.clip(first, 0.0, 1.0))
    for _ in range(2):  # restarts shake a simplex that collapsed early
        best = _nelder_mead(cost, best)
    return unit(best)


def _nelder_mead(
    cost: Callable[[np.ndarray], float], x0: np.ndarray, scale: float = 0.15,
    iterations: int = 600,
) -> np.ndarray:  # fmt: skip
    """Minimise ``cost`` over the unit cube from ``x0`` (points clipped into it)."""
    n = len(x0)
    simplex = [np.clip(x0, 0.0, 1.0)]
    for i in range(n):
        vertex = x0.copy()
        vertex[i] = vertex[i] + scale if vertex[i] + scale <= 1.0 else vertex[i] - scale
        simplex.append(np.clip(vertex, 0.0, 1.0))
    values = [cost(v) for v in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-10:
            break
        centre = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]

        def at(t: float, centre: np.ndarray = centre, worst: np.ndarray = worst) -> np.ndarray:
            return np.asarray(np.clip(centre + t * (centre - worst), 0.0, 1.0))

        reflected = at(1.0)
        r = cost(reflected)
        if r < values[0]:
            expanded = at(2.0)
            e = cost(expanded)
            simplex[-1], values[-1] = (expanded, e) if e < r else (reflected, r)
        elif r < values[-2]:
            simplex[-1], values[-1] = reflected, r
        else:
            contracted = at(0.5) if r < values[-1] else at(-0.5)
            c = cost(contracted)
            if c < min(r, values[-1]):
                simplex[-1], values[-1] = contracted, c
            else:
                simplex = [simplex[0] + 0.5 * (v - simplex[0]) for v in simplex]
                values = [values[0], *(cost(v) for v in simplex[1:])]
    best: np.ndarray = simplex[int(np.argmin(values))]
    return best
