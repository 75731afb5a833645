"""How fast the simulator runs, on this machine.

1. Virtual clock: simulated seconds per wall second for Llama-3.1-8B on an H100 (the quickstart
   study) at a quarter of its SLO knee, at the knee and at twice it, in one process (one core).
2. HTTP: `kneepoint sim serve` streaming every token, in this process, measured by kneepoint's
   own sweep path (load generator, /metrics poller, scoring) in a second process over loopback:
   the ramp of rates it keeps up with, judged by its own clock lag (p99 < 5 ms, read from the
   server's wall-clock driver), then twice the knee. Where the server falls behind, the sweep
   must not count the point (``LoadPoint.server_behind``, from the share of its steps over
   5 ms late in ``kneepoint:sim_clock_lag_seconds``).

Run: .venv/bin/python benchmarks/sim_speed.py [--rates 20,40,80,160] [--seconds 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import versions

from kneepoint.config.study import load_study
from kneepoint.load.plan import plan_requests
from kneepoint.probes.backends.measure import Instruments, measure_async
from kneepoint.probes.client.loadgen import LoadOptions
from kneepoint.probes.runtime import configure_logging
from kneepoint.sim.engine import Arrival, SimEngine
from kneepoint.sim.loadpoint import simulate_capacity

STUDY = Path(__file__).resolve().parent.parent / "configs" / "studies" / "quickstart.yaml"


def virtual_speed(rate: float, seconds: float, *, eager: bool = False) -> tuple[float, float]:
    """Simulated seconds per wall second of one run, and the simulated seconds."""
    study = load_study(STUDY)
    plan = plan_requests(study.workload, rate, num_requests=int(rate * seconds))
    engine = SimEngine(study.gpu, study.model, study.engine, eager=eager)
    arrivals = [Arrival(p.at_s, p.prompt, p.max_tokens) for p in plan]
    start = time.perf_counter()
    engine.run(arrivals)
    wall = time.perf_counter() - start
    return engine.now_s / wall, engine.now_s


def median_speeds(rate: float, seconds: float, repeats: int) -> tuple[float, float, float]:
    """Median speed with the decode cohort, without it (eager), and the median of the
    pairwise ratios: the two run in turn so that machine drift hits both alike."""
    bulk, eager, ratios = [], [], []
    for _ in range(repeats):
        bulk.append(virtual_speed(rate, seconds)[0])
        eager.append(virtual_speed(rate, seconds, eager=True)[0])
        ratios.append(bulk[-1] / eager[-1])
    return statistics.median(bulk), statistics.median(eager), statistics.median(ratios)


@dataclass(frozen=True, slots=True)
class HttpPoint:
    """One rate over HTTP: the server's own clock lag, and what a sweep made of the point."""

    lag_p99_ms: float
    ok: int
    failed: int
    late_share: float | None
    """Share of the window's steps over 5 ms late, as the sweep read it from /metrics."""
    counted: bool
    """Whether kneepoint's sweep counts the point (not server_behind, nor client-bound)."""
    reason: str | None


def _measure(
    url: str, rate: float, seconds: float
) -> tuple[int, int, float | None, bool, str | None]:
    """kneepoint's own load point against the server: its load generator, /metrics poller and
    scoring, as ``kneepoint sweep`` runs them."""
    study = load_study(STUDY)
    plan = plan_requests(study.workload, rate, num_requests=int(rate * seconds))
    options = LoadOptions(model="llama-3.1-8b", request_timeout_s=120.0)
    instruments = Instruments(scrape_interval_s=1.0, sim_telemetry=True)
    measured = asyncio.run(measure_async(url, plan, rate, options, study.slo,
                                         instruments=instruments))  # fmt: skip
    point = measured.point
    ok = sum(r.ok for r in measured.records)
    late = point.signals.sim_clock_late_share
    return ok, len(measured.records) - ok, late, point.valid, point.invalid_reason()


def http_point(rate: float, seconds: float) -> HttpPoint:
    """Serve in this process's event loop; measure a load point from a client process."""
    import multiprocessing
    import socket

    import uvicorn

    from kneepoint.config.catalog import gpu_catalogue, model_catalogue
    from kneepoint.sim.serve_args import ServeArgs
    from kneepoint.sim.server import build_server

    study = load_study(STUDY)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ServeArgs(gpu_catalogue()["h100-sxm"], model_catalogue()["llama-3.1-8b"],
                     "llama-3.1-8b", study.engine, "127.0.0.1", port)  # fmt: skip
    server = build_server(args)
    config = uvicorn.Config(server.app, host="127.0.0.1", port=port, log_config=None,
                            access_log=False, lifespan="on")  # fmt: skip
    runner = uvicorn.Server(config)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:

        async def main() -> tuple[int, int, float | None, bool, str | None]:
            serving = asyncio.create_task(runner.serve())
            while not runner.started:
                await asyncio.sleep(0.05)
            result = pool.apply_async(_measure, (f"http://127.0.0.1:{port}", rate, seconds))
            while not result.ready():
                await asyncio.sleep(0.2)
            runner.should_exit = True
            await serving
            return result.get()

        ok, failed, late, counted, reason = asyncio.run(main())
    assert server.realtime is not None
    lags = sorted(server.realtime.lags_s)
    p99 = lags[int(0.99 * (len(lags) - 1))] if lags else 0.0
    return HttpPoint(p99 * 1000, ok, failed, late, counted, reason)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", default="10,20,40,80,160,320,640",
        help="HTTP rates to try, in order; the ramp stops at the first one it falls behind at",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=20.0, help="HTTP load per rate")
    parser.add_argument("--repeats", type=int, default=5, help="virtual-clock runs per figure")
    args = parser.parse_args()
    print(versions.line(), flush=True)
    configure_logging(level="warning")
    study = load_study(STUDY)
    capacity, _ = simulate_capacity(study, 1200, 20.0, rel_tol=0.05)
    knee = capacity.passing_rps
    print(f"quickstart SLO capacity (virtual clock): {knee:.1f} req/s")
    print(f"virtual clock, 60 s of arrivals, median of {args.repeats} "
          "(goal: >= 300x at the knee, >= 150x at twice it):")  # fmt: skip
    for label, rate in (("quarter knee", knee / 4), ("knee", knee), ("twice the knee", 2 * knee)):
        bulk, eager, ratio = median_speeds(rate, 60.0, args.repeats)
        print(f"  {label} ({rate:.1f} req/s): {bulk:.0f}x real time; stepping every request "
              f"(eager, as the HTTP server runs) {eager:.0f}x; ratio {ratio:.2f}")  # fmt: skip
    print(
        "HTTP server, streaming every token, measured by kneepoint's own sweep path "
        "(goal: clock lag p99 < 5 ms over the point's window, i.e. at most 1% of its steps "
        "over 5 ms late; a point the server did not clock is not counted):"
    )
    kept = 0.0
    for rate in (float(r) for r in args.rates.split(",")):  # the ramp, up to the first miss
        if not _show(rate, http_point(rate, args.seconds)):
            break
        kept = rate
    _show(2 * knee, http_point(2 * knee, args.seconds), " (twice the knee)")
    print(f"largest ramp rate the HTTP server keeps up with: {kept:g} req/s; "
          f"the quickstart's knee is {knee:.1f} req/s")  # fmt: skip


def _show(rate: float, got: HttpPoint, note: str = "") -> bool:
    """Print one HTTP point; whether the server kept up with its clock there."""
    # Judged as the sweep judges it: at most 1% of the window's steps over 5 ms late (the
    # lag p99 printed beside it is over every step, quiet start and drain included).
    keeps_up = got.counted and not got.failed
    late = "-" if got.late_share is None else f"{got.late_share:.1%}"
    verdict = "counted" if got.counted else f"not counted: {got.reason}"
    print(f"  {rate:6.1f} req/s{note}: lag p99 {got.lag_p99_ms:7.2f} ms (all steps), {got.ok} ok, "
          f"{got.failed} failed, window steps over 5 ms late {late} -> "
          f"{'keeps up' if keeps_up else 'falls behind'}; the sweep: {verdict}",
          flush=True)  # fmt: skip
    return keeps_up


if __name__ == "__main__":
    main()
