"""How fast the simulator runs, on this machine.

1. Virtual clock: simulated seconds per wall second for Llama-3.1-8B on an H100 (the quickstart
   study) at its SLO knee, and at a quarter of it, in one process (one core).
2. HTTP: the largest request rate `kneepoint sim serve` keeps up with while streaming every
   token to real clients, judged by its own clock lag (p99 < 5 ms, read from the server's
   wall-clock driver), with httpx streaming clients in a second process over loopback.

Run: .venv/bin/python benchmarks/sim_speed.py [--rates 20,40,80,160] [--seconds 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import httpx

from kneepoint.agent.logs import configure_logging
from kneepoint.config.study import load_study
from kneepoint.load.plan import plan_requests
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


async def _client(url: str, rate: float, seconds: float) -> tuple[int, int]:
    study = load_study(STUDY)
    plan = plan_requests(study.workload, rate, num_requests=int(rate * seconds))
    ok = failed = 0
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        origin = time.monotonic()

        async def one(index: int) -> None:
            nonlocal ok, failed
            p = plan[index]
            await asyncio.sleep(max(0.0, origin + p.at_s - time.monotonic()))
            body = {"prompt": list(p.prompt), "max_tokens": p.max_tokens, "stream": True}
            try:
                async with client.stream("POST", "/v1/completions", json=body) as response:
                    async for _ in response.aiter_lines():
                        pass
                ok += 1
            except httpx.HTTPError:
                failed += 1

        await asyncio.gather(*(one(i) for i in range(len(plan))))
    return ok, failed


def http_lag(rate: float, seconds: float) -> tuple[float, int, int]:
    """Serve in this process's event loop; drive load from a client process."""
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

        async def main() -> tuple[int, int]:
            serving = asyncio.create_task(runner.serve())
            while not runner.started:
                await asyncio.sleep(0.05)
            result = pool.apply_async(_run_client, (f"http://127.0.0.1:{port}", rate, seconds))
            while not result.ready():
                await asyncio.sleep(0.2)
            runner.should_exit = True
            await serving
            return result.get()

        ok, failed = asyncio.run(main())
    assert server.realtime is not None
    lags = sorted(server.realtime.lags_s)
    p99 = lags[int(0.99 * (len(lags) - 1))] if lags else 0.0
    return p99, ok, failed


def _run_client(url: str, rate: float, seconds: float) -> tuple[int, int]:
    return asyncio.run(_client(url, rate, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", default="10,20,40,80,160,320,640",
        help="HTTP rates to try, in order; the ramp stops at the first one it falls behind at",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=20.0, help="HTTP load per rate")
    parser.add_argument("--repeats", type=int, default=5, help="virtual-clock runs per figure")
    args = parser.parse_args()
    configure_logging(level="warning")
    study = load_study(STUDY)
    capacity, _ = simulate_capacity(study, 1200, 20.0, rel_tol=0.05)
    knee = capacity.passing_rps
    print(f"quickstart SLO capacity (virtual clock): {knee:.1f} req/s")
    print(f"virtual clock, 60 s of arrivals, median of {args.repeats} (goal: >= 200x at the knee):")
    for label, rate in (("quarter knee", knee / 4), ("knee", knee)):
        bulk, eager, ratio = median_speeds(rate, 60.0, args.repeats)
        print(f"  {label} ({rate:.1f} req/s): {bulk:.0f}x real time; stepping every request "
              f"(eager, as the HTTP server runs) {eager:.0f}x; ratio {ratio:.2f}")  # fmt: skip
    print("HTTP server, streaming every token (goal: clock lag p99 < 5 ms):")
    kept, behind = None, None
    for rate in (float(r) for r in args.rates.split(",")):
        p99, ok, failed = http_lag(rate, args.seconds)
        keeps_up = p99 < 0.005 and not failed
        print(f"  {rate:6.1f} req/s: lag p99 {p99 * 1000:6.2f} ms, {ok} ok, {failed} failed "
              f"-> {'keeps up' if keeps_up else 'falls behind'}", flush=True)  # fmt: skip
        if not keeps_up:
            behind = rate
            break
        kept = rate
    beyond = f", falls behind at {behind:g}" if behind else " (the highest rate tried)"
    print(f"largest rate the HTTP server keeps up with: {kept or 0:g} req/s{beyond}; "
          f"the quickstart's knee is {knee:.1f} req/s")  # fmt: skip


if __name__ == "__main__":
    main()
