"""Refine fitted constants on whole replays: the recordings' capacity and token gaps as the
simulator measures them, with its queues and its scheduler's step mix in the loop.

Fitting step times alone leaves the split between compute and memory loosely pinned (both
grow with load), and a split that prices the average step right can still price the large
steps that set ITL p95 and the knee wrong. Here the simulator replays each recording's first
repeat under candidate constants and the fit scores what a user reads: SLO capacity, and
ITL p50 and p95 at every rate up to the first one that fails, those near the knee weighted
down as the queue makes them ill-conditioned (``gap_weight``). A replay takes about a second,
so a few dozen of them, over the three constants that set the split and the engine core's CPU
work per running sequence, by Nelder-Mead.

The API server's cost per streamed chunk (``frontend_chunk_s``) is not fitted: it paces the
same token gaps as the engine core's work per sequence, and recorded sweeps cannot tell the
two apart, while the engine's own step rate and its GPU idling past the knee (real H100: NVML
78-87% at ~250 running) show the engine core's. Fitting both, with the chunk cost at ~90 us
beside 60 us of CPU work, replayed the held-out H100 recordings 8% high (benchmarks/README.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import numpy as np

from kneepoint.calibration.fit import BOUNDS, gaps_ms, nelder_mead
from kneepoint.calibration.recorded import RecordedSweep
from kneepoint.calibration.replay import replay
from kneepoint.records import Efficiency

REFINED = ("mfu", "weight_bandwidth", "kv_bandwidth")
"""The constants the coarse grid spans; the direct search moves the engine core's CPU work
per running sequence (``cpu_request_s``) with them."""
GRID = (0.25, 0.5, 0.75)
"""Where in each refined constant's range (0: its lower bound) the coarse grid looks."""
CAPACITY_WEIGHT = 3.0
"""Capacity's weight beside one rate's token gaps: it is the figure a tune decides on."""
GAP_WEIGHTS = (1.0, 0.5)
"""Weights of ITL p50 and p95: a p95 rests on a twentieth of the gaps, so it is noisier."""
FULL_WEIGHT_LOAD = 0.8
"""Share of a recording's capacity up to which its token gaps count in full (``gap_weight``)."""
BUSY_RUNNING = 64.0
"""Points with at least this many sequences running bound the CPU work per sequence
(``sequence_ceiling_s``): with fewer, it is a few ms a step at most and the GPU's work sets
the gaps alone."""


def first_repeat(recorded: RecordedSweep) -> RecordedSweep:
    """The recording with only its first repeat's points (what the refinement replays)."""
    first = min(p.repeat for p in recorded.result.points)
    points = tuple(p for p in recorded.result.points if p.repeat == first)
    result = recorded.result.model_copy(update={"points": points})
    return dataclasses.replace(recorded, result=result)


def replay_errors(recordings: Sequence[RecordedSweep], efficiency: Efficiency) -> list[float]:
    """Log errors of each recording's capacity (weighted) and of its ITL p50 and p95 at
    every rate up to its first failing one, replayed under ``efficiency``."""
    errors = []
    for rec in recordings:
        simulated = replay(rec, efficiency)
        real_cap, sim_cap = rec.result.capacity_rps, simulated.capacity_rps
        if real_cap and sim_cap:
            errors.append(CAPACITY_WEIGHT * math.log(sim_cap / real_cap))
        elif real_cap:
            errors.append(CAPACITY_WEIGHT * math.log(0.5))  # nothing passed: far off
        failing = [p.rate_rps for p in rec.result.points if p.margin > 1.0]
        limit = min(failing, default=math.inf)
        sim_at = {(p.repeat, p.rate_rps): p for p in simulated.points}
        for real in rec.result.points:
            sim = sim_at[(real.repeat, real.rate_rps)]
            real_gaps, sim_gaps = gaps_ms(real), gaps_ms(sim)
            if real_gaps is None or sim_gaps is None or real.rate_rps > limit:
                continue
            if not (real.counted and sim.counted):
                continue
            steady = gap_weight(real.rate_rps, real_cap)
            for weight, r, s in zip(GAP_WEIGHTS, real_gaps, sim_gaps, strict=True):
                errors.append(steady * weight * math.log(s / r))
    return errors


def gap_weight(rate_rps: float, capacity_rps: float | None) -> float:
    """The weight of a rate's token gaps: 1 up to ``FULL_WEIGHT_LOAD`` of the recording's
    capacity, then falling as 1 - load to 0 at the capacity. A queue's wait grows as
    1 / (1 - load), and so does what a few percent of error in the engine's ceiling does to
    the gaps near the knee. On the real H100 Llama recordings (tests/fixtures/real), 55 ->
    65 us of CPU per sequence moved capacity by up to 5% and the replayed ITL p50 at 40-44
    req/s (90-99% of capacity) by 17-27 points (fp8 at 44 req/s: -5% -> +22%), at 8-32 req/s
    by under 0.1 point. Fitted at full weight, those few gaps pulled the KV bandwidth from
    0.8 to 0.48 (base and fp8 recordings), and the held-out defaults' ITL p50 at 32 req/s
    went 27% long; weighted so, 6% (benchmarks/README.md)."""
    if not capacity_rps:
        return 1.0
    return min(1.0, max(0.0, (1.0 - rate_rps / capacity_rps) / (1.0 - FULL_WEIGHT_LOAD)))


def replay_error(recordings: Sequence[RecordedSweep], efficiency: Efficiency) -> float:
    """Root mean square of ``replay_errors``."""
    errors = replay_errors(recordings, efficiency)
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0


def sequence_ceiling_s(recordings: Sequence[RecordedSweep]) -> float:
    """The shortest step (token gap p50 over the steps a streamed gap spans) per running
    sequence, over the recorded points with ``BUSY_RUNNING`` or more sequences running: a
    step cannot be shorter than the engine core's work on its sequences, so this bounds that
    work per sequence from above (0 where no point ran that many)."""
    ceilings = []
    for rec in recordings:
        interval = rec.result.config.stream_interval or 1
        for point in rec.result.points:
            running, gaps = point.point.signals.running_mean, gaps_ms(point)
            if running is not None and running >= BUSY_RUNNING and gaps is not None:
                ceilings.append(gaps[0] / 1e3 / interval / running)
    return min(ceilings, default=0.0)


def refine(
    recordings: Sequence[RecordedSweep], start: Efficiency, evaluations: int = 24
) -> Efficiency:
    """``start`` with the compute/memory split and the engine core's CPU work per running
    sequence chosen to replay the recordings best: the best of ``start`` and a coarse grid
    over the split (a direct search from one point stays near it, and another model or GPU
    may want a split far from the built-in one: the Llama-8B chat recordings alone fitted KV
    reads anywhere from 0.59 to 0.75 of peak bandwidth), then a direct search over the split
    and the CPU work together, under ``sequence_ceiling_s``."""
    firsts = [first_repeat(r) for r in recordings]
    ceiling = sequence_ceiling_s(recordings)
    bounds = {n: BOUNDS[n] for n in REFINED}
    if ceiling > 0:  # else no recorded step ran enough sequences to show it
        bounds["cpu_request_s"] = (0.0, ceiling)

    def unit(x: np.ndarray) -> Efficiency:
        clipped = np.clip(x, 0.0, 1.0)
        values = {
            n: lo + (hi - lo) * float(v)
            for (n, (lo, hi)), v in zip(bounds.items(), clipped, strict=True)
        }
        return start.model_copy(update=values)

    def cost(x: np.ndarray) -> float:
        return replay_error(firsts, unit(x))

    x0 = np.clip([(getattr(start, n) - lo) / (hi - lo) for n, (lo, hi) in bounds.items()], 0, 1)
    grid = [
        np.array([*p, *x0[len(REFINED) :]]) for p in itertools.product(GRID, repeat=len(REFINED))
    ]
    best = min([x0, *grid], key=cost)
    return unit(nelder_mead(cost, best, scale=0.1, evaluations=evaluations))
