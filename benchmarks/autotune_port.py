"""vLLM's own tuner, `benchmarks/auto_tune/auto_tune.sh`, ported to vLLM's CPU build: the
procedure an inference engineer runs instead of kneepoint, step for step.

1. Memory probe: auto_tune starts the grid's last cell at ``--gpu-memory-utilization`` 0.98,
   then 0.97 and so on, and serves every cell at the highest that starts: the largest KV pool
   the device holds. On vLLM's CPU build that flag is a share of the NUMA node's total memory,
   and on this VM the node keeps a fifth of its total out of reach (14.2 GiB total, 11.5 free):
   every share from 0.98 down to auto_tune's floor of 0.90 failed to start (2026-11-28). The
   port probes ``--kv-cache-memory-bytes`` instead, at shares of the node's memory available
   just before each start (as vLLM counts it), from 0.95 down in steps of 0.05 (the server's
   own footprint, ~2 GiB, is not known before it starts, and each failed start costs a model
   load). Every start, failed ones included, is device time.
2. Grid: ``max_num_seqs`` {128, 256} x ``max_num_batched_tokens`` {512, 1024, 2048, 4096},
   prefix caching on, a fresh server a cell.
3. Per cell: `vllm bench serve` at rate inf with ``inf_prompts`` (auto_tune: 1,000); if its
   latency passes, the cell's rate is inf. Otherwise from int(throughput) + 1 down in steps of
   1 req/s, ``step_prompts`` (auto_tune: 100) Poisson arrivals each, after resetting the
   prefix cache and sleeping 5 s, until the latency passes. The latency check is the study's
   SLO read from vLLM bench's percentiles (auto_tune checks one P99 E2EL limit), so both tools
   chase one target.
4. Best: the passing cell with the highest measured request throughput.

Device time is every second a server was up, starting included (the same clock kneepoint's
ledger keeps); the 10 s auto_tune sleeps between cells with no server is not counted.
"""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import vllm_cpu

from kneepoint.probes.backends import Endpoint
from kneepoint.probes.server.server_failure import ServerFailedError
from kneepoint.records.engine import EngineConfig

SHARES = tuple(round(0.95 - 0.05 * i, 2) for i in range(19))
"""The memory probe's shares of the memory available, largest first."""
NUM_SEQS = (128, 256)
NUM_BATCHED_TOKENS = (512, 1024, 2048, 4096)
DEV_MODE = {"VLLM_SERVER_DEV_MODE": "1"}
"""auto_tune starts its servers in dev mode, which serves /reset_prefix_cache."""

Limits = dict[tuple[str, int], float]
BENCH_NAMES = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2el"}
"""kneepoint's metric names -> vLLM bench's (its percentiles are ``p{q}_{name}_ms``)."""


def margin(result: vllm_cpu.BenchRun, limits: Limits) -> float:
    """vLLM bench's worst observed/limit ratio over the SLO (at most 1: it meets)."""
    return max(result.get(f"p{q}_{BENCH_NAMES[m]}_ms") / limit for (m, q), limit in limits.items())


@dataclass(frozen=True)
class Bench:
    """What every `vllm bench serve` run of one comparison shares: the CPU build, the model,
    the workload's fixed prompt and answer lengths and the study's SLO."""

    venv: Path
    model: Path
    input_tokens: int
    output_tokens: int
    limits: Limits

    def run(
        self, endpoint: Endpoint, rate_rps: float, prompts: int, seed: int
    ) -> vllm_cpu.BenchRun:  # fmt: skip
        return vllm_cpu.bench_serve(self.venv, endpoint, self.model, rate_rps, prompts,
                                    input_tokens=self.input_tokens,
                                    output_tokens=self.output_tokens, seed=seed)  # fmt: skip

    def margin(self, run: vllm_cpu.BenchRun) -> float:
        return margin(run, self.limits)


@dataclass
class Cell:
    max_num_seqs: int
    max_num_batched_tokens: int
    rate_rps: float | None = None
    """The rate that passed (inf where the closed-loop run did); None where none did."""
    throughput_rps: float = 0.0
    device_s: float = 0.0
    tried: list[tuple[float, float]] = field(default_factory=list)
    """(rate, margin) of every bench run, inf first."""


@dataclass
class AutoTune:
    kv_bytes: int | None = None
    """The largest KV pool the memory probe started (None: none did)."""
    probe_device_s: float = 0.0
    cells: list[Cell] = field(default_factory=list)

    @property
    def device_s(self) -> float:
        return self.probe_device_s + sum(c.device_s for c in self.cells)

    def best(self) -> Cell | None:
        passing = [c for c in self.cells if c.rate_rps is not None]
        return max(passing, key=lambda c: c.throughput_rps) if passing else None

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "device_s": self.device_s}

    @classmethod
    def from_dict(cls, kept: dict[str, Any]) -> AutoTune:
        cells = [Cell(**{**c, "tried": [tuple(t) for t in c["tried"]]}) for c in kept["cells"]]
        return cls(kept["kv_bytes"], kept["probe_device_s"], cells)


def cell_config(base: EngineConfig, kv_bytes: int, seqs: int, tokens: int) -> EngineConfig:
    return base.model_copy(
        update={
            "kv_cache_memory_bytes": kv_bytes, "max_num_seqs": seqs,
            "max_num_batched_tokens": tokens, "enable_prefix_caching": True,
        }
    )  # fmt: skip


def node_available_bytes(node: Path = Path("/sys/devices/system/node/node0/meminfo")) -> int:
    """Memory available on NUMA node 0 as vLLM's CPU build counts it when it places the KV
    pool (``get_memory_node_info``: free, file pages and reclaimable slab); the host's where
    the node's meminfo is missing. On this VM the two differ by half (11.5 against 23 GiB)."""
    if not node.is_file():
        return int(psutil.virtual_memory().available)
    fields = {}
    for line in node.read_text().splitlines():
        parts = line.split()
        fields[parts[2].rstrip(":")] = int(parts[3]) * 1024
    return sum(fields[k] for k in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable"))


def probe_memory(venv: Path, base: EngineConfig, found: AutoTune) -> None:
    """The largest KV pool that starts with the grid's last (largest) cell."""
    for share in SHARES:
        kv_bytes = int(share * node_available_bytes()) // 2**20 * 2**20
        config = cell_config(base, kv_bytes, NUM_SEQS[-1], NUM_BATCHED_TOKENS[-1])
        started = time.monotonic()
        try:
            with vllm_cpu.served(venv, config, env=DEV_MODE):
                found.kv_bytes = kv_bytes
        except ServerFailedError:
            pass
        found.probe_device_s += time.monotonic() - started
        if found.kv_bytes is not None:
            return


def run_cell(bench: Bench, config: EngineConfig, prompts: tuple[int, int]) -> Cell:
    """One cell of the grid on a fresh server: the closed-loop run, then the ladder down."""
    assert config.max_num_seqs and config.max_num_batched_tokens
    cell = Cell(config.max_num_seqs, config.max_num_batched_tokens)
    started = time.monotonic()
    try:
        with vllm_cpu.served(bench.venv, config, env=DEV_MODE) as endpoint:

            def one(rate: float, count: int) -> vllm_cpu.BenchRun:
                run = bench.run(endpoint, rate, count, seed=len(cell.tried))
                cell.tried.append((rate, bench.margin(run)))
                return run

            _ladder(cell, one, lambda: _reset_prefix_cache(endpoint.url), prompts, bench.limits)
    except ServerFailedError:
        pass  # auto_tune logs the failed start and goes on to the next cell
    cell.device_s = time.monotonic() - started
    return cell


def _ladder(
    cell: Cell, bench: Callable[[float, int], vllm_cpu.BenchRun], reset: Callable[[], None],
    prompts: tuple[int, int], limits: Limits,
) -> None:  # fmt: skip
    first = bench(math.inf, prompts[0])
    if margin(first, limits) <= 1.0:
        cell.rate_rps, cell.throughput_rps = math.inf, first.get("request_throughput")
        return
    rate = int(first.get("request_throughput")) + 1
    while rate > 0:
        reset()
        time.sleep(5.0)  # auto_tune's pause after the reset
        run = bench(float(rate), prompts[1])
        if margin(run, limits) <= 1.0:
            cell.rate_rps, cell.throughput_rps = float(rate), run.get("request_throughput")
            return
        rate -= 1


def _reset_prefix_cache(url: str) -> None:
    request = urllib.request.Request(f"{url}/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def auto_tune(
    bench: Bench, base: EngineConfig, prompts: tuple[int, int], say: Callable[[str], None]
) -> AutoTune:
    """auto_tune.sh's whole procedure on ``base`` (its model, lengths and eager mode kept)."""
    found = AutoTune()
    probe_memory(bench.venv, base, found)
    say(f"auto_tune: memory probe {found.kv_bytes} bytes ({found.probe_device_s:.0f} s)")
    if found.kv_bytes is None:
        return found
    for seqs in NUM_SEQS:
        for tokens in NUM_BATCHED_TOKENS:
            config = cell_config(base, found.kv_bytes, seqs, tokens)
            cell = run_cell(bench, config, prompts)
            found.cells.append(cell)
            say(f"auto_tune: {seqs} seqs, {tokens} tokens: rate {cell.rate_rps}, "
                f"{cell.throughput_rps:.2f} req/s, {cell.device_s:.0f} s")  # fmt: skip
    return found
