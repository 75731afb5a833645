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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.calibration.replay import replay_steps
from kneepoint.physics import BatchShape, ResolvedEngine, Roofline, kv_layout, resolve_engine
from kneepoint.policies.diagnosis import observed_shape
from kneepoint.records import Efficiency, GpuSpec, ModelSpec, SweepPoint

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
    """One recorded point's steps (their shapes: one average, or the simulator's steps in
    its replay), the mean time the real engine took per step and, where the steps are the
    simulator's, the real token gaps' median (a decode waits one step per token, so its
    gaps are the step times, weighted by the decodes each step carries)."""

    label: str
    shapes: tuple[BatchShape, ...]
    observed_s: float
    gpu: GpuSpec
    model: ModelSpec
    engine: ResolvedEngine
    itl_p50_s: float | None = None

    def predicted_s(self, efficiency: Efficiency) -> float:
        return sum(self._prices(efficiency)) / len(self.shapes)

    def errors(self, efficiency: Efficiency) -> list[float]:
        """Log errors of the mean step and, where known, of the median token gap."""
        prices = self._prices(efficiency)
        errors = [math.log(sum(prices) / len(prices) / self.observed_s)]
        if self.itl_p50_s is not None:
            weights = [s.samples for s in self.shapes]
            errors.append(math.log(_weighted_median(prices, weights) / self.itl_p50_s))
        return errors

    def _prices(self, efficiency: Efficiency) -> list[float]:
        roofline = Roofline(self.gpu, self.model, self.engine, efficiency)
        return [roofline.step(s).wall_s for s in self.shapes]


def _weighted_median(values: Sequence[float], weights: Sequence[int]) -> float:
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs) or 1
    seen = 0.0
    for value, weight in pairs:
        seen += weight
        if seen >= total / 2:
            return value
    return pairs[-1][0]


def _busy(entry: SweepPoint) -> bool:
    signals = entry.point.signals
    return bool(
        entry.counted and signals.steps_per_s and (signals.running_mean or 0.0) >= MIN_RUNNING
    )


def step_samples(recordings: Sequence[RecordedSweep]) -> list[StepSample]:
    """The average step of every valid, busy point of the recordings, as vLLM's metrics
    describe it."""
    samples = []
    for rec in recordings:
        study = rec.study
        engine = resolve_engine(rec.result.config, study.gpu, study.model)
        layout = kv_layout(study.model, engine)
        for entry in sorted(rec.result.points, key=lambda p: (p.repeat, p.rate_rps)):
            found = observed_shape(entry.point.signals, study.workload, layout)
            if found is None or not _busy(entry):
                continue
            samples.append(
                StepSample(
                    _label(rec, entry),
                    (found[0],),
                    _observed_s(entry),
                    study.gpu,
                    study.model,
                    engine,
                )
            )
    return samples


def replayed_samples(
    recordings: Sequence[RecordedSweep], efficiency: Efficiency, per_point: int = 16
) -> list[StepSample]:
    """Every valid, busy point with the steps the simulator ran in its place (``per_point``
    of them, spread over their sizes). The step time is not linear in the batch (fixed
    costs, the overlap of compute and memory), so the price of the average step is not the
    average price of the steps: fitted to averages, the constants price a real mix of small
    and large steps too high."""
    samples = []
    for rec in recordings:
        study = rec.study
        engine = resolve_engine(rec.result.config, study.gpu, study.model)
        for entry, shapes in replay_steps(rec, efficiency):
            if not shapes or not _busy(entry):
                continue
            samples.append(
                StepSample(
                    _label(rec, entry),
                    spread(shapes, per_point),
                    _observed_s(entry),
                    study.gpu,
                    study.model,
                    engine,
                    _itl_p50_s(entry, engine.stream_interval),
                )
            )
    return samples


def spread(shapes: Sequence[BatchShape], count: int) -> tuple[BatchShape, ...]:
    """``count`` of the shapes at evenly spaced ranks of their size: their mean price is the
    steps' mean price at a fraction of the cost."""
    ordered = sorted(shapes, key=lambda s: (s.new_tokens, s.kv_tokens))
    if len(ordered) <= count:
        return tuple(ordered)
    return tuple(ordered[int((i + 0.5) * len(ordered) / count)] for i in range(count))


def _label(rec: RecordedSweep, entry: SweepPoint) -> str:
    return f"{rec.name} @ {entry.rate_rps:g} req/s"


def gaps_ms(point: SweepPoint) -> tuple[float, float] | None:
    """A point's token gaps, p50 and p95 in ms (the class with the longest: a mix of classes
    shares its steps); None when it measured none."""
    dists = [d["itl"] for d in point.point.dists.values() if "itl" in d]
    if not dists:
        return None
    return max(d.p50_ms for d in dists), max(d.p95_ms for d in dists)


def _itl_p50_s(entry: SweepPoint, stream_interval: int) -> float | None:
    """The real token gaps' median, when they are gaps of one step each (a token per
    streamed chunk)."""
    gaps = gaps_ms(entry)
    return gaps[0] / 1e3 if gaps is not None and stream_interval == 1 else None


def _observed_s(entry: SweepPoint) -> float:
    return 1.0 / (entry.point.signals.steps_per_s or 1.0)


def step_error(efficiency: Efficiency, samples: Sequence[StepSample]) -> float:
    """Root mean squared log error of the predicted step times and gaps (0.1 is ~10%)."""
    errors = [e for s in samples for e in s.errors(efficiency)]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def fit_steps(
    samples: Sequence[StepSample],
    start: Efficiency | None = None,
    restarts: int = 2,
    fields: Sequence[str] | None = None,
    bounds: Mapping[str, tuple[float, float]] = BOUNDS,
) -> Efficiency:
    """The constants that price the observed steps best, starting from ``start`` (then
    ``restarts`` more searches from the best found, to shake a simplex that collapsed).
    ``fields`` (default: every constant of ``bounds``, fp8's speed-up only where some sample
    ran fp8 weights) are searched within ``bounds``."""
    start = start or Efficiency()
    names = (
        list(fields)
        if fields is not None
        else [
            n
            for n in bounds
            if n != "fp8_gemm_speedup" or any(s.engine.fp8_compute for s in samples)
        ]
    )

    def unit(x: np.ndarray) -> Efficiency:
        clipped = np.clip(x, 0.0, 1.0)
        values = {
            n: bounds[n][0] + (bounds[n][1] - bounds[n][0]) * float(v)
            for n, v in zip(names, clipped, strict=True)
        }
        return start.model_copy(update=values)

    def cost(x: np.ndarray) -> float:
        return step_error(unit(x), samples)

    first = np.array(
        [(getattr(start, n) - bounds[n][0]) / (bounds[n][1] - bounds[n][0]) for n in names]
    )
    best = nelder_mead(cost, np.clip(first, 0.0, 1.0))
    for _ in range(restarts):
        best = nelder_mead(cost, best)
    return unit(best)


def nelder_mead(
    objective: Callable[[np.ndarray], float],
    x0: np.ndarray,
    scale: float = 0.15,
    evaluations: int = 1500,
) -> np.ndarray:
    """Minimise ``objective`` over the unit cube from ``x0`` (points clipped into it), in at
    most about ``evaluations`` calls of it."""
    calls = 0

    def cost(x: np.ndarray) -> float:
        nonlocal calls
        calls += 1
        return objective(x)

    n = len(x0)
    simplex = [np.clip(x0, 0.0, 1.0)]
    for i in range(n):
        vertex = x0.copy()
        vertex[i] = vertex[i] + scale if vertex[i] + scale <= 1.0 else vertex[i] - scale
        simplex.append(np.clip(vertex, 0.0, 1.0))
    values = [cost(v) for v in simplex]
    while calls < evaluations:
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
