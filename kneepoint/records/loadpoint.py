"""One measured load point: what the client saw, what the engine said, and whether to trust it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import Record
from kneepoint.records.measure import Dist
from kneepoint.records.slo import GoodputRule


class SpecReading(Record):
    """Speculative decoding over a load point, from vLLM's spec-decode counters between the
    scrapes that bracket its window (``vllm:spec_decode_num_drafts_total`` and its siblings;
    vLLM's ``v1/spec_decode/metrics.py`` gives the PromQL these follow)."""

    drafts: float = Field(ge=0.0)
    """Drafts verified: sequence-steps that carried draft tokens."""
    draft_tokens: float = Field(ge=0.0)
    accepted_tokens: float = Field(ge=0.0)
    generated_tokens: float = Field(ge=0.0)
    """Output tokens over the same scrapes (``vllm:generation_tokens``): each sequence-step
    yields one, plus what its draft had accepted."""
    accepted_by_position: tuple[float, ...] = ()
    """Share of drafts whose i-th draft token was accepted (a token is accepted only after
    every one before it: the shares fall with the position)."""

    @property
    def acceptance_length(self) -> float | None:
        """Tokens a verified draft yields on average, the target's own token included
        (vLLM's "mean acceptance length")."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def draft_share(self) -> float | None:
        """Share of decoding sequence-steps that carried a draft (an n-gram draft needs its
        pattern in the context; a model drafter drafts every step)."""
        steps = self.generated_tokens - self.accepted_tokens
        return min(1.0, self.drafts / steps) if steps > 0 else None

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens over draft tokens proposed."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None


class Signals(Record):
    """Engine and GPU signals over a load point's stable window; ``None`` where no source
    could tell (no GPU, an older vLLM, a backend without that instrument)."""

    kv_usage_mean: float | None = Field(default=None, ge=0.0, le=1.0)
    kv_usage_max: float | None = Field(default=None, ge=0.0, le=1.0)
    running_mean: float | None = Field(default=None, ge=0.0)
    running_max: float | None = Field(default=None, ge=0.0)
    waiting_mean: float | None = Field(default=None, ge=0.0)
    preemptions_per_s: float | None = Field(default=None, ge=0.0)
    prefix_hit_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """Prefix-cache hits / queries, in tokens."""
    external_hit_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    """The KV connector's (offloading's) prefix-cache hits / queries, in tokens: of the
    prompt tokens past the device's own hit, the share loaded from host memory."""
    tokens_per_step_mean: float | None = Field(default=None, ge=0.0)
    steps_per_s: float | None = Field(default=None, ge=0.0)
    """Engine steps per second (the count of vLLM's tokens-per-step histogram, as a rate)."""
    prompt_tokens_per_s: float | None = Field(default=None, ge=0.0)
    generation_tokens_per_s: float | None = Field(default=None, ge=0.0)
    max_num_seqs: int | None = Field(default=None, ge=1)
    """The running cap the server runs with, where it says (vLLM does not export it)."""
    num_gpu_blocks: int | None = Field(default=None, ge=0)
    block_size: int | None = Field(default=None, ge=1)
    gpu_util_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    memory_util_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    sm_util_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    tensor_util_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    dram_bw_util_pct: float | None = Field(default=None, ge=0.0, le=100.0)
    power_w: float | None = Field(default=None, ge=0.0)
    engine_cpu_pct: float | None = Field(default=None, ge=0.0)
    """CPU of the engine's processes (100 = one core busy)."""
    frontend_cpu_pct: float | None = Field(default=None, ge=0.0)
    """CPU of the busiest API-server process (100 = one core): vLLM's API server is one
    Python event loop, so near 100 it is saturated (``kneepoint.probes.telemetry.cpu``; the
    simulator's own front-end model where it streams at a cost). None where unread."""
    engine_cores_bound: int | None = Field(default=None, ge=1)
    """Cores the engine asked for: vLLM's CPU build binds one OpenMP thread to each (None on
    a GPU build, or where the log did not say)."""
    host_cpu_pressure: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of the point's wall time in which some runnable task of the host waited for a
    CPU (Linux PSI, ``/proc/pressure/cpu`` "some"); None where the kernel does not say."""
    host_cpu_others_cores: float | None = Field(default=None, ge=0.0)
    """Cores' worth of the host's CPU spent outside the measurement over the point (its busy
    time, a VM's steal included, less the measuring process's and the server's process
    tree's); None where unread (``kneepoint.probes.telemetry.cpu``)."""
    host_idle_cores: float | None = Field(default=None, ge=0.0)
    """Cores' worth of the host's CPU nobody used over the point: room for another
    process (an API server) without taking the engine's; None where unread."""
    gpu_other_processes: int | None = Field(default=None, ge=0)
    """Processes outside the measurement that ran on the GPU over the point (NVML); None
    where unread or where NVML's pids cannot be matched to ours (a container)."""
    sim_clock_late_share: float | None = Field(default=None, ge=0.0, le=1.0)
    """``kneepoint sim serve`` only: share of the window's steps whose tokens left more than
    5 ms behind the simulator's own clock (the host, not the simulated engine, set them)."""
    server_e2e_sum_s: float | None = Field(default=None, ge=0.0)
    server_requests: float | None = Field(default=None, ge=0.0)
    """The server's own end-to-end latencies, summed, and their count, over the whole point:
    vLLM's ``e2e_request_latency_seconds`` histogram read before and after the load (None
    where the server exports none). Little's law from these needs no gauge sampling."""
    server_latency: dict[str, Dist] = Field(default_factory=dict)
    """The server's own view of its latencies over the whole point, by metric (``ttft``,
    ``itl``, ``e2e``), from vLLM's histograms read before and after the load (percentiles
    interpolated within its buckets, as PromQL does): from its arrival stamp, so without
    the client's lag or its HTTP front; empty where it exports none."""
    speculation: SpecReading | None = None
    """Speculative decoding's counters over the window (None where the server does not
    speculate or exports none)."""
    scrape_share: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of the ``/metrics`` scrapes due in the stable window that landed there (None
    where nothing was scraped on a schedule)."""
    metric_samples: int = Field(default=0, ge=0)
    gpu_samples: int = Field(default=0, ge=0)


class Backlog(Record):
    """Requests in the system (due and not yet answered) over a point's stable window, read
    by the client (``kneepoint.load.backlog``): whether the server kept up with the load."""

    start_requests: int = Field(ge=0)
    end_requests: int = Field(ge=0)
    growth_share: float
    """The count's least-squares slope over the window, per second, over the offered rate:
    the share of the load the server left waiting (about 0 where it kept up)."""
    second_half_growth_share: float
    """The same over the window's second half: a server still filling up levels off there."""
    noise_requests: float = Field(ge=0.0)
    """The rise a server that keeps up shows by chance over the window: three sigmas of
    arrivals less departures, sqrt(2 x rate x span)."""
    settled: bool
    """Whether the window's requests (their p90, due to answered) lived shorter than the time
    from the first arrival to the window's middle: only then can the server have filled up
    and the growth be judged."""
    margin: float = Field(ge=0.0)
    """Where the point settled and both rises are past their noise, the offered rate over
    the rate the server answered at the lesser growth (whole window, second half), against
    the same at the study's ``measurement.max_backlog_growth`` (``load.backlog.rate_margin``),
    else 0: over 1 the point misses its SLO, whatever its latencies."""


class LoadPoint(Record):
    """One offered rate, scored over its stable window."""

    rate_rps: float = Field(gt=0.0)
    window_start_s: float
    window_end_s: float
    duration_s: float = Field(default=0.0, ge=0.0)
    """From the first scheduled send to the last response: how long the point held the server."""
    sent: int = Field(ge=0)
    """Requests in the stable window."""
    completed: int = Field(ge=0)
    failed: int = Field(ge=0)
    timed_out: int = Field(ge=0)
    achieved_rps: float = Field(ge=0.0)
    """Completions per second over the window."""
    goodput_rps: float = Field(ge=0.0)
    """The offered rate times the share of the window's requests that completed and met the
    limits of their class on their own, by ``goodput_rule`` (at most the offered rate)."""
    goodput_rule: GoodputRule = "every_limit"
    """The per-request rule ``goodput_rps`` counted by (``Slo.goodput_rule``)."""
    latency_from: Literal["schedule", "slot"] = "schedule"
    """Where the point's TTFT and e2e counted from (``MeasurementSpec.latency_from``)."""
    goodput_from_schedule_rps: float | None = Field(default=None, ge=0.0)
    """Counted from the slot: the goodput the same requests give counted from their schedule
    (None where the schedule was the origin)."""
    goodput_by_class_rps: dict[str, float] = Field(default_factory=dict)
    attainment_by_class: dict[str, float] = Field(default_factory=dict)
    """Per class, the share of its window's requests that completed and met every limit of
    its class (empty in recordings made before it was kept)."""
    output_tokens_per_s: float | None = Field(default=None, ge=0.0)
    """Tokens the window's completed requests generated, per second of the window, counted
    at the client (None in recordings made before it was)."""
    prompt_tokens_per_s: float | None = Field(default=None, ge=0.0)
    """Their prompts' tokens per second of the window, likewise."""
    meets_slo: bool
    violations: tuple[str, ...] = ()
    backlog: Backlog | None = None
    """Whether the server kept up over the window (None in recordings made before it was
    kept, or without an SLO); a growing backlog is one of ``violations``."""
    dists: dict[str, dict[str, Dist]]
    """Per traffic class, per metric (ttft, itl, tpot, e2e)."""
    send_lag_p50_ms: float
    send_lag_p99_ms: float
    """The client's own lag behind its schedule (concurrency-cap waits taken out)."""
    late_send_share: float | None = Field(default=None, ge=0.0, le=1.0)
    """Share of the stable window's sends later than the study's ``late_send_ms`` (None in
    recordings made before it was kept)."""
    client_bound: bool
    """The client fell behind its schedule (``late_send_share`` over the study's limit) and
    the point missed its SLO only by that lag: counted from the actual sends it would have
    met it. Whether the server failed cannot be told, so the point is not counted."""
    signals: Signals = Signals()
    concurrency_ratio: float | None = Field(default=None, ge=0.0)
    """Little's law: the server's concurrency over the client's. From vLLM's e2e histogram
    where it exports one (its latencies summed over the client's, sends to ends, over the
    whole point), else from its running plus waiting gauges over the achieved rate times the
    window's mean latency (None without either, or too few scrapes to judge by)."""
    inconsistent: bool = False
    """A point that met its SLO, so held a steady state, yet whose ``concurrency_ratio`` is
    off by more than 2x: the server's counts and the client's latencies do not describe the
    same load (``kneepoint.load.trust``), so it is not counted."""

    server_behind: bool = False
    """The simulator fell behind its own clock (more than 1% of its steps over 5 ms late,
    i.e. clock lag p99 over 5 ms): its latencies are the host's, not the simulated engine's,
    so it is not counted."""
    host_busy: bool = False
    """Something else held the host's CPUs over the point (``Signals.host_cpu_pressure``
    past the study's ``measurement.max_host_cpu_pressure`` and ``host_cpu_others_cores`` past
    its ``max_host_other_cores``), or another process ran on the GPU: it measured the host, so
    it is not counted."""

    @property
    def valid(self) -> bool:
        return not (self.client_bound or self.inconsistent or self.server_behind or self.host_busy)

    def invalid_reason(self) -> str | None:
        """Why the point is not counted, in a few words (None when it is)."""
        if self.host_busy:
            return f"the host is busy: {host_words(self.signals)} over the point; not counted"
        if self.client_bound:
            late = self.late_send_share
            share = f"{late:.0%} of sends late, " if late is not None else ""
            return f"client-bound: {share}the SLO missed only by the client's own lag; not counted"
        if self.server_behind:
            late = self.signals.sim_clock_late_share or 0.0
            return f"simulator behind its clock: {late:.1%} of steps over 5 ms late; not counted"
        if self.inconsistent:
            return (
                f"inconsistent: the server held {self.concurrency_ratio:.2f}x the "
                "sequences rate x latency says; not counted"
            )
        return None


def host_words(signals: Signals) -> str:
    """What held the host, in words: another process on the GPU, or its CPU pressure and the
    cores others used."""
    gpu = signals.gpu_other_processes
    if gpu:
        return f"{gpu} other process{'es' if gpu > 1 else ''} ran on the GPU"
    said = f"CPU pressure {signals.host_cpu_pressure or 0.0:.0%}"
    others, cores = signals.host_cpu_others_cores, signals.engine_cores_bound
    if others is not None:
        said += f", {others:.1f} cores used by other work"
    if cores and signals.engine_cpu_pct is not None:
        # what the engine got against what it asked for: its threads stall where others run
        said += f", the engine {signals.engine_cpu_pct / cores:.0f}% of the {cores} it bound"
    return said
