"""How fast our open-loop load generator is, side by side with GuideLLM, on this machine.

Both generators drive the same minimal streaming endpoint (benchmarks/fast_sse_server.py: it
answers at once with a few SSE token chunks, a usage chunk and [DONE]) pinned to one CPU core,
from one other core, with short requests (a few prompt and output tokens) at open-loop rates.
For each it prints the highest rate it keeps on schedule and its overhead per request.
Definitions, the same for both tools:

- send lag: when the generator starts sending a request minus when it was scheduled, on the
  tool's own clock. Ours: ``RequestRecord.sent_s - scheduled_s``. GuideLLM: ``resolve_start -
  targeted_start`` (where its worker hands the request to its HTTP backend: the point that
  matches ours). Its own ``request_dispatch_delay`` (to the first header byte written, so also
  building the request and opening a connection) is printed beside it.
- sustained: over the stable window (requests ordered by scheduled time, the first and last
  10% of the span dropped), p99 send lag < --lag-limit-ms, no request failed, and at least 95%
  of the planned requests were sent. Each rate runs --seconds, longer where that would be
  fewer than --min-requests requests. Rates double from --start-rate until one is not
  sustained (halve if the first is not), then are bisected geometrically to --precision.
- overhead: the median over the window of (end of stream - send, both as above) minus the
  endpoint's own median handling time (request read whole -> answer written, timed by the
  endpoint), at --start-rate, far below both limits: what the client side adds to a request
  once it starts sending it (building and writing it, a connection if one is opened,
  loopback, reading and parsing the stream). The same counted from the scheduled time (so
  with the send lag) is printed beside it.

- looser: the same search again under a p99 send lag of --loose-lag-limit-ms (50 ms), from
  the rate the first search ended on: a criterion both tools can meet where the 5 ms one
  leaves one of them with nothing (GuideLLM 0.8.1's lag floor is ~7 ms p99 at any rate).
- achieved vs offered: one step at --offered-rps (1,000 req/s), whether sustained or not: the
  requests completed over it per second, from the first scheduled send to the last stream's
  end, beside the offered rate (and how many were sent and failed).

Other processes on this machine can take the cores; the CPU they used on each core during
each step is printed, and a failed step that shared a core with more than a fifth of a core of
other work is measured again, once. The endpoint's own CPU is printed too: where it was near a
whole core at the first rate not sustained, the rate found is marked ">=" (the endpoint, not
the generator, may have been the limit), as it is when --max-rate itself was sustained.

Run: .venv/bin/python benchmarks/loadgen_capacity.py [--seconds 5] [--max-rate 8192]
     [--repeats 1] [--skip-guidellm] [--guidellm-workers 2] [--arrivals constant|poisson]
GuideLLM runs from its own environment (scripts/install-guidellm.sh); it is no dependency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psutil
import versions
from guidellm_driver import GuideLLM
from loadgen_figures import Search, Step, Timing, log_step, report, report_loose, score

from kneepoint.load.plan import PlannedRequest
from kneepoint.probes.client.loadgen import LoadOptions, run_load

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "benchmarks" / "fast_sse_server.py"
MODEL = "fast-sse"
DISTURBED = 0.2


class Endpoint:
    """The fast endpoint in its own process, pinned to its own core."""

    def __init__(self, core: int | None) -> None:
        argv = [sys.executable, str(SERVER), "--port", "0", "--model", MODEL]
        argv += ["--cpu", str(core)] if core is not None else []
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the endpoint did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[-1])}"

    def reset(self) -> None:
        httpx.post(f"{self.url}/stats").raise_for_status()

    def handling_ms(self) -> float:
        """The endpoint's median handling time per generation request since the reset."""
        return float(httpx.get(f"{self.url}/stats").json()["p50_us"]) / 1000

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class CpuWatch:
    """CPU used on the two cores by other processes than the ones measured, and by the
    endpoint (near a whole core, the endpoint rather than the generator may be the limit)."""

    def __init__(self, cores: tuple[int, int] | None, endpoint_pid: int) -> None:
        self.cores = cores
        self.endpoint = psutil.Process(endpoint_pid)

    @contextmanager
    def watch(self) -> Iterator[list[float]]:
        """Yields a list that holds ``Step.cpu`` once the block has ended."""
        result: list[float] = []
        before, start = self._others(), time.monotonic()
        yield result
        after, wall = self._others(), time.monotonic() - start
        result += [max(0.0, (a - b) / wall) for a, b in zip(after, before, strict=True)]

    def _others(self) -> tuple[float, float, float]:
        """CPU seconds so far: each core's busy time less ours (this process and the children
        it has waited for, i.e. GuideLLM) or the endpoint's, and the endpoint's."""
        mine, endpoint = psutil.Process().cpu_times(), self.endpoint.cpu_times()
        own = mine.user + mine.system + mine.children_user + mine.children_system
        served = endpoint.user + endpoint.system
        if self.cores is None:
            return 0.0, 0.0, served
        per_core = psutil.cpu_times(percpu=True)
        client, server = per_core[self.cores[0]], per_core[self.cores[1]]
        return _busy(client) - own, _busy(server) - served, served


def _busy(times: Any) -> float:
    """Busy seconds of one core; time the hypervisor gave to others (steal) counts too."""
    fields = ("user", "nice", "system", "irq", "softirq", "steal")
    return sum(float(getattr(times, name, 0.0)) for name in fields)


Measure = Callable[[float, float], list[Timing]]


class Ours:
    """kneepoint.probes.client.loadgen.run_load, in this process (pinned to the client core)."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url, self.args = url, args

    def __call__(self, rate: float, seconds: float) -> list[Timing]:
        prompt = tuple(range(1000, 1000 + self.args.prompt_tokens))
        starts = arrivals(rate, seconds, self.args.arrivals)
        tokens = self.args.output_tokens
        plan = [PlannedRequest(i, at, "short", prompt, tokens) for i, at in enumerate(starts)]
        options = LoadOptions(model=MODEL, request_timeout_s=60.0)
        records = asyncio.run(run_load(self.url, plan, options))
        return [Timing(r.scheduled_s, r.sent_s, r.end_s if r.ok else None) for r in records]


def arrivals(rate: float, seconds: float, kind: str) -> list[float]:
    count = round(rate * seconds)
    if kind == "constant":
        return [i / rate for i in range(count)]
    rng, at, times = random.Random(7), 0.0, []
    for _ in range(count):
        times.append(at)
        at += rng.expovariate(rate)
    return times


class Runner:
    """Measures one tool rate by rate, and searches for its highest sustained rate."""

    def __init__(self, name: str, measure: Measure, args: argparse.Namespace,
                 endpoint: Endpoint, watch: CpuWatch) -> None:  # fmt: skip
        self.name, self.measure, self.args = name, measure, args
        self.endpoint, self.watch = endpoint, watch

    def step(self, rate: float) -> Step:
        """One rate; a failed step that shared a core with other work is measured again."""
        # Low rates run longer, so that their p99 is not the largest of a few dozen lags.
        seconds = max(self.args.seconds, self.args.min_requests / rate)
        for attempt in range(2):
            self.endpoint.reset()
            with self.watch.watch() as other:
                timings = self.measure(rate, seconds)
            step = score(rate, seconds, timings, self.endpoint.handling_ms(), self.args)
            step = replace(step, cpu=(other[0], other[1], other[2]))
            log_step(self.name, step)
            if step.sustained or max(other[:2]) <= DISTURBED or attempt:
                break
            print("    (other processes shared the cores: measured again)", flush=True)
        return step

    def looser(self, strict: Search) -> tuple[Search, Step]:
        """A second search under --loose-lag-limit-ms, from where the strict one ended (the
        lowest rate tried, where none was sustained), then one step at --offered-rps."""
        a = self.args
        start = strict.best.rate if strict.best else min(step.rate for step in strict.steps)
        looser = argparse.Namespace(**{**vars(a), "lag_limit_ms": a.loose_lag_limit_ms,
                                       "start_rate": start})  # fmt: skip
        print(f"  {self.name}: p99 lag < {a.loose_lag_limit_ms:g} ms, from {start:g} req/s",
              flush=True)  # fmt: skip
        runner = Runner(self.name, self.measure, looser, self.endpoint, self.watch)
        return runner.search(), runner.step(a.offered_rps)

    def search(self) -> Search:
        """Double from the start rate until a rate fails (halve if the first fails; --max-rate
        is the last tried), then bisect between the highest sustained and the lowest failed."""
        a = self.args
        result = Search()
        result.steps.append(first := self.step(a.start_rate))
        low, high = (first, None) if first.sustained else (None, first)
        while low is not None and high is None and low.rate < a.max_rate:
            result.steps.append(step := self.step(min(low.rate * 2, a.max_rate)))
            low, high = (step, None) if step.sustained else (low, step)
        while low is None and high is not None and high.rate / 2 >= a.min_rate:
            result.steps.append(step := self.step(high.rate / 2))
            low, high = (step, high) if step.sustained else (None, step)
        while low is not None and high is not None and high.rate / low.rate > 1 + a.precision:
            result.steps.append(step := self.step(round((low.rate * high.rate) ** 0.5, 1)))
            low, high = (step, high) if step.sustained else (low, step)
        result.best, result.failed = low, high
        return result


def _pin() -> tuple[int, int] | None:
    """(client core, endpoint core): this process (and GuideLLM, which inherits it) on one,
    the endpoint on another, so that neither takes the other's CPU."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    os.sched_setaffinity(0, {cores[1]})
    return cores[1], cores[0]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--seconds", type=float, default=5.0, help="of arrivals per rate (at least)")
    add("--min-requests", type=int, default=100, help="per rate: low rates run longer")
    add("--start-rate", type=float, default=16.0, help="first rate; overhead is measured here")
    add("--min-rate", type=float, default=2.0, help="lowest rate tried when halving")
    add("--max-rate", type=float, default=8192.0, help="highest rate tried")
    add("--precision", type=float, default=0.1, help="bisect until rates are this close")
    add("--arrivals", choices=("constant", "poisson"), default="constant")
    add("--prompt-tokens", type=int, default=4)
    add("--output-tokens", type=int, default=4)
    add("--lag-limit-ms", type=float, default=5.0)
    add("--loose-lag-limit-ms", type=float, default=50.0,
        help="a second search per tool under this looser p99 lag (0: skip)")  # fmt: skip
    add("--offered-rps", type=float, default=1000.0,
        help="one step per tool at this rate: achieved vs offered (0: skip)")  # fmt: skip
    add("--repeats", type=int, default=1, help="whole searches per tool, for the spread")
    add("--skip-guidellm", action="store_true")
    add("--guidellm-venv", help="an environment with guidellm (default: install one)")
    add("--guidellm-workers", type=int, default=2,
        help="GuideLLM's worker processes (its default, 10, does worse on one core)")  # fmt: skip
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    print(versions.line(), flush=True)
    # Stopped from outside, still stop the endpoint and GuideLLM (the finally blocks below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cores = _pin()
    endpoint = Endpoint(cores[1] if cores else None)
    where = f"client on core {cores[0]}, endpoint on core {cores[1]}" if cores else "unpinned"
    print(f"load generator capacity: {where}; endpoint {endpoint.url}", flush=True)
    try:
        watch = CpuWatch(cores, endpoint.process.pid)
        with tempfile.TemporaryDirectory(prefix="loadgen-capacity-") as tmp:
            tools: list[tuple[str, Measure]] = [("kneepoint", Ours(endpoint.url, args))]
            releases = {"kneepoint": version("kneepoint")}
            if not args.skip_guidellm:
                guidellm = GuideLLM(endpoint.url, args, Path(tmp))
                tools.append(("GuideLLM", guidellm))
                releases["GuideLLM"] = guidellm.version
            results: dict[str, list[Search]] = {name: [] for name, _ in tools}
            loose: dict[str, list[Search]] = {name: [] for name, _ in tools}
            offered: dict[str, list[Step]] = {name: [] for name, _ in tools}
            for _ in range(args.repeats):  # tools take turns, so drift hits both alike
                for name, measure in tools:
                    runner = Runner(name, measure, args, endpoint, watch)
                    results[name].append(strict := runner.search())
                    if args.loose_lag_limit_ms > 0 and args.offered_rps > 0:
                        search, step = runner.looser(strict)
                        loose[name].append(search)
                        offered[name].append(step)
            report(results, args, releases)
            if args.loose_lag_limit_ms > 0 and args.offered_rps > 0:
                report_loose(loose, offered, args)
    finally:
        endpoint.close()


if __name__ == "__main__":
    main()
