"""One load point against an HTTP endpoint: load, telemetry on the same clock, a LoadPoint.

The generator and the ``/metrics`` poller share one event loop (scrapes are only fetched
during the load, parsed after it); NVML samples on its own thread; the engine's CPU is read
from its process tree. Everything measured is kept alongside the scored point.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from kneepoint.load import PlannedRequest, Trust, load_point, window_bounds
from kneepoint.probes.client import LoadOptions, run_load
from kneepoint.probes.runtime import Clock, run_async
from kneepoint.probes.server import Failure, ServerFailedError
from kneepoint.probes.telemetry import HostLoad, HttpSampler, NvmlSampler, Scrape, summarize_signals
from kneepoint.records import GpuSample, LoadPoint, RequestRecord, Slo

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Instruments:
    """What to read besides the client's own records."""

    scrape_interval_s: float = 1.0
    adaptive_scrapes: bool = False
    """Scrape at most every ``scrape_interval_s``, further apart where a scrape takes long
    (``kneepoint.probes.telemetry.samplers.COST_FACTOR``)."""
    sim_telemetry: bool = False
    """The server is ``kneepoint sim serve``: read its ``/telemetry`` for GPU samples."""
    nvml_indices: tuple[int, ...] = ()
    """Sample these local GPUs through NVML, a server's all (none: do not)."""
    engine_pid: int | None = None
    engine_cores: int | None = None
    """Cores the engine bound its threads to (vLLM's CPU build logs them; None: unsaid)."""
    hang_after_s: float = 60.0
    """A server that answers nothing, not even ``/metrics``, for this long is hung and the
    point is abandoned: a live vLLM answers between engine steps, and the longest step in
    the real H100 sweeps (tests/fixtures/real) was 56 ms at 1,675 tokens, so a minute of
    silence is no load, only a wedged server (which would otherwise cost every request its
    full timeout before the point ended)."""


@dataclass(frozen=True, slots=True)
class Measured:
    point: LoadPoint
    records: tuple[RequestRecord, ...]
    scrapes: tuple[Scrape, ...]
    gpu: tuple[GpuSample, ...]
    metrics_text: tuple[str, ...] = ()
    """The raw ``/metrics`` text before and after the load (the point's snapshots)."""


async def measure_async(
    url: str,
    plan: Sequence[PlannedRequest],
    rate_rps: float,
    options: LoadOptions,
    slo: Slo | None,
    *,
    instruments: Instruments = Instruments(),
    trim: float = 0.1,
    trust: Trust | None = None,
    warmup_s: float = 0.0,
) -> Measured:
    clock = Clock.start()
    sampler = HttpSampler(
        url,
        clock,
        interval_s=instruments.scrape_interval_s,
        sim_telemetry=instruments.sim_telemetry,
        api_key=options.api_key,
        adaptive=instruments.adaptive_scrapes,
    )
    nvml = NvmlSampler(clock, instruments.nvml_indices) if instruments.nvml_indices else None
    host = HostLoad(instruments.engine_pid, url)  # one reading of the server's tree for both
    stop, ready = asyncio.Event(), asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop, ready))
    if nvml is not None:
        nvml.start()
    limit_s = instruments.hang_after_s
    try:
        # The baseline scrape is tried again where it fails, 10 s a try: a server hung from
        # the start must be named within the limit, not after every try has timed out.
        await _unless_silent(asyncio.create_task(ready.wait()), sampler, limit_s)
        load = asyncio.create_task(run_load(url, plan, options, clock=clock, heard=sampler.heard))
        records = await _unless_silent(load, sampler, limit_s)
    except BaseException:
        sampling.cancel()  # no closing scrape of a server that did not answer
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
        raise
    finally:
        stop.set()
        if not sampling.done():
            await sampling
        others = nvml.others(host.own_pids) if nvml is not None else None
        gpu = [*sampler.gpu, *(nvml.stop() if nvml is not None else [])]
    scrapes = sampler.scrapes()
    start, end = window_bounds(records, trim, warmup_s)
    held = host.reading()
    signals = summarize_signals(
        scrapes,
        gpu,
        start,
        end,
        engine_cpu_pct=held.engine_pct,
        frontend_cpu_pct=held.frontend_pct,
        host_idle_cores=held.idle_cores,
        engine_cores_bound=instruments.engine_cores,
        host_cpu_pressure=held.pressure,
        host_cpu_others_cores=held.others_cores,
        gpu_other_processes=others,
        scrape_share=sampler.share_landed(start, end),
    )
    point = load_point(
        rate_rps,
        records,
        slo,
        signals=signals,
        trim=trim,
        trust=trust,
        warmup_s=warmup_s,
    )
    texts = tuple(t for t in (sampler.first_text, sampler.last_text) if t is not None)
    return Measured(point, tuple(records), tuple(scrapes), tuple(gpu), texts)


async def _unless_silent(task: asyncio.Task[T], sampler: HttpSampler, limit_s: float) -> T:
    """The task's result; raises ServerFailedError (hung), the task cancelled, once the
    server has answered nothing for ``limit_s``."""
    while True:
        done, _ = await asyncio.wait({task}, timeout=1.0)
        if done:
            return task.result()
        silent_s = sampler.clock.now() - sampler.answered_s
        if silent_s > limit_s:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            what = f"the server answered nothing for {silent_s:.0f} s, not even /metrics"
            raise ServerFailedError(Failure("hung", what, None, ()))


def measure(
    url: str,
    plan: Sequence[PlannedRequest],
    rate_rps: float,
    options: LoadOptions,
    slo: Slo | None,
    *,
    instruments: Instruments = Instruments(),
    trim: float = 0.1,
    trust: Trust | None = None,
    warmup_s: float = 0.0,
) -> Measured:
    """``measure_async`` on a fresh event loop."""
    return run_async(
        measure_async(
            url,
            plan,
            rate_rps,
            options,
            slo,
            instruments=instruments,
            trim=trim,
            trust=trust,
            warmup_s=warmup_s,
        )
    )
