"""When a load point can tell what it measured: the study's rules for trusting a point, and how
a point that cannot tell is measured again (``kneepoint.load.trust``, ``kneepoint.measure.sweep``).

A point that cannot tell (a client too late to keep its schedule, a server whose own counts
describe another load) is *unknown*: never a pass, never a failure. The defaults come from
the measurements named beside each field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kneepoint.records.base import InputRecord


class MeasurementSpec(InputRecord):
    """Trust rules for load points, and what a point that cannot tell gets instead."""

    late_send_ms: float | None = Field(default=None, gt=0.0, le=600_000.0)
    """A send later than this behind its schedule is late. None: 5% of the tightest TTFT or
    e2e limit (the latencies a late send moves, since they count from the schedule), at
    least 10 ms; 10 ms without such a limit."""
    late_send_share: float = Field(default=0.01, gt=0.0, lt=1.0)
    """A point whose stable window has more late sends than this share did not send on its
    schedule. A p99 limit rests on the worst 1% of requests, so more late sends than that can
    decide it. Such a point's pass still counts (late sends only bunch the load and lengthen
    latencies counted from the schedule); its miss counts only where the SLO is missed even
    with latencies counted from the actual sends, else the point is unknown (client-bound)."""
    littles_law_tolerance: float = Field(default=2.0, gt=1.0, le=10.0)
    """How far the server's own concurrency may stray from rate x the client's latency on a
    point that met its SLO before the point is unknown (inconsistent). vLLM's e2e histogram
    read 0.69-0.93 of the client's latency on every point of the CPU recordings
    (tests/fixtures/real/cpu-tiny-llama); the H100 recordings' gauges 0.81-1.03."""
    min_scrape_share: float = Field(default=0.5, ge=0.0, le=1.0)
    """Where the server exports no e2e histogram, Little's law is judged from its gauges only
    if at least this share of the scrapes due in the window landed: on a busy 2-core host
    under a third land, and those few read a server idler than it is."""
    max_host_cpu_pressure: float = Field(default=0.3, ge=0.0, le=1.0)
    """A point over which some runnable task of the host waited for a CPU more than this
    share of the time (Linux PSI, ``/proc/pressure/cpu`` "some") measured a busy host, not
    the server: it is unknown and taken again. On a 2-core AMD EPYC host vLLM's CPU build,
    its API server and kneepoint's load generator together read 6-13% over 5 s windows at
    2-12 req/s of a real tune; another process beside them stalls the build's OpenMP threads
    (``kneepoint.probes.telemetry.cpu``). 1 turns the check off."""
    max_host_other_cores: float = Field(default=0.25, ge=0.0)
    """...and the host spent more than this many cores' worth of CPU outside the measurement
    (its busy time less the measuring process's and the server's tree's). Pressure alone
    cannot say whose tasks waited: a real-tier point past a 2-core host's capacity read 0.36
    with the server, its API front and the client queued on one core on a CI machine.
    On the 2-core AMD host others read 0.00 cores with nothing else running, 1.00 beside one
    CPU-bound process and 1.77 beside two (``kneepoint.probes.telemetry.cpu.HostLoad`` over
    5 s); a quarter core is load a neighbour's shell or a daemon does not reach."""
    latency_from: Literal["schedule", "slot"] = "schedule"
    """Where TTFT and end-to-end latency count from. ``schedule`` (the default): each
    request's scheduled send, so neither a slow client nor a slow server hides a wait.
    ``slot``: under ``workload.client.max_concurrency``, when the capped client's slot freed
    (the schedule plus the wait for a slot; the client's own lateness still counts), as
    ``vllm bench serve --max-concurrency`` counts them. An overloaded mix whose cap queues
    requests for seconds misses every limit from the schedule, whatever the configuration: a
    published mixed-traffic experiment (a 14B model on a 48 GB GPU, goodput at 32 req/s, a
    128-request cap) measured prefix caching lifting completion from 21% to 75% this way
    (configs/scenarios/qwen14b-ada-mix.yaml). Points then carry the schedule's goodput beside
    it."""
    max_backlog_growth: float | None = Field(default=0.05, gt=0.0, lt=1.0)
    """A point whose backlog (requests due and not yet answered, read by the client) grew
    faster than this share of the offered rate over its stable window, past its noise, did
    not keep up: it misses its SLO whatever its latencies, which a bigger batch keeps low
    for a while past the ceiling (``kneepoint.load.backlog``). On the simulated
    frontend-bound scenario the rates a 120 s point sustains read under 1% and the first
    overloaded ones 6.5-18.5% (configs/scenarios/frontend-bound.yaml with 2 API servers,
    26-36 req/s). None turns it off."""
    retakes: int = Field(default=1, ge=0, le=3)
    """Times a point that cannot tell (or contradicts its configuration's curve) is measured
    again at the same rate before it is left unknown: as long (past the ceiling a longer
    point grows a longer queue, another yardstick), on fresh requests, scraped half as
    often (a lighter measurement on a host that could not tell)."""
    scrape_interval_s: float | None = Field(default=None, gt=0.0, le=60.0)
    """Seconds between ``/metrics`` scrapes during a point. None: adaptive, at least 1 s and
    at least 200 times what the last scrape took, so scraping costs the server's API thread
    under 0.5% of its time (``probes.samplers.COST_FACTOR``, ``benchmarks/scrape_cost.py``)."""
    knee_tolerance: float = Field(default=0.05, gt=0.0, le=0.5)
    """A knee search bisects until its bracket is within this share of its passing rate.
    ``tune``'s baseline, ``sweep`` and ``diagnose`` all search the same way, so they read one
    capacity from the same points."""
    server_nice: int = Field(default=10, ge=0, le=19)
    """How much lower a launched server's CPU priority is than the load generator's. The
    generator is an instrument: a few percent of a core, but it must wake on time, and on a
    host whose cores the server also uses it otherwise waits behind the engine's busy loop.
    Measured on vLLM's CPU build (2 cores, 20 req/s): client send lag p99 244-1,041 ms at
    equal priority, 2 ms with the server at +10, the server's own TTFT mean 21 ms either way;
    at 36 req/s its output was 2,004-2,312 tok/s at either priority. 0 leaves it alone; a
    server kneepoint attaches to keeps its own."""
    lowest_rps: float | None = Field(default=None, gt=0.0, le=1e5)
    """The lowest rate a knee search measures: below it a point takes too long to say
    anything. None: the search's start rate over 16."""
