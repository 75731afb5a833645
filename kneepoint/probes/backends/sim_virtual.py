"""The simulator in-process on its virtual clock, opened as a study's backend: one engine per
opening, as one launched server, warmed as one is, its load points run on it in turn, faults
injected where the study asks, no server, no HTTP."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import structlog

from kneepoint.load import (
    BURST_RPS,
    PlannedRequest,
    Trust,
    load_point,
    point_seed,
    rate_salt,
    warmup_plan,
)
from kneepoint.physics import resolve_engine, startup_seconds
from kneepoint.probes.backends.base import DeviceClock, Opening, Target, rejected
from kneepoint.probes.backends.virtual_faults import Lifetime, faulted_records, faulted_signals
from kneepoint.probes.server import ServerFailedError
from kneepoint.records import MARKER, Faults, LoadPoint, PointArtifacts, RequestRecord
from kneepoint.sim import acceptance_of, refuse_start, run_plan, serving, simulate_load_point

log = structlog.get_logger(__name__)
SEND_TIMEOUT_S = 120.0
"""A request still unfinished this long after a sent plan's last send counts as timed out."""


@contextmanager
def virtual_target(o: Opening) -> Iterator[Target]:
    """The simulator in-process, on its virtual clock: no server, no HTTP."""
    study, config, size, faults = o.study, o.config, o.size, o.faults or Faults()
    refuse_start(faults)
    engine = resolve_engine(config, study.gpu, study.model)
    started = startup_seconds(study.model, engine) + faults.slow_start_s
    clock = DeviceClock(config.gpu_count, virtual_s=started)
    life = Lifetime(faults)
    for kind in faults.signal_faults():  # as the live server says it, once per launch
        log.warning(f"{MARKER} {kind}")
    if faults.slow_start_s > 0:
        log.warning(f"{MARKER} slow_start", seconds=faults.slow_start_s)
    # One server for the opening's points, as a launched vLLM serves a sweep: its prefix cache
    # and host memory keep what earlier points stored. A fresh engine a point met an empty
    # library at every point: the real H200 document-qa server with 64 GiB offloaded found 98%
    # of its lookups in host memory from the second point on, and served 6.68 req/s where the
    # fresh engines read 4.35 (tests/fixtures/real/h200-llama8b-docqa).
    sim = serving(
        study.gpu, study.model, config, study.efficiency, acceptance=acceptance_of(study.workload)
    )

    def virtual(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
        seed = point_seed(study.workload.seed, repeat, attempt)
        simulated = simulate_load_point(
            study,
            rate,
            size.requests(rate),
            config,
            seed,
            trace=o.trace,
            warmup_s=size.warmup_s,
            trust=Trust.of(study.slo, study.measurement),
            on=sim,
            salt=rate_salt(rate, attempt),  # as a live server's points: no prompt repeats
        )
        sim.abort_all()  # the client gave up on what the point's cut-off left running
        point, records = simulated.point, simulated.load.records
        held, died = life.serve(point.duration_s, study.workload.client.request_timeout_s)
        clock.virtual_s = (clock.virtual_s or 0.0) + held
        if died is not None:
            raise ServerFailedError(died)
        if faults.injected():
            records = faulted_records(records, faults, life.arrived)
            point = load_point(
                rate,
                records,
                study.slo,
                warmup_s=size.warmup_s,
                signals=faulted_signals(point.signals, faults),
                trust=Trust.of(study.slo, study.measurement),
            )
        life.arrived += len(records)
        if o.keep is not None:
            o.keep(PointArtifacts(rate, repeat, point, records, attempt=attempt))
        failure = rejected(records)
        if failure is not None:
            raise ServerFailedError(failure)
        return point

    def send(plan: Sequence[PlannedRequest], rate: float) -> tuple[RequestRecord, ...]:
        began = sim.now_s
        load = run_plan(
            sim,
            plan,
            timeout_s=SEND_TIMEOUT_S,
            request_timeout_s=study.workload.client.request_timeout_s,
            max_concurrency=study.workload.client.max_concurrency,
        )
        sim.abort_all()
        clock.virtual_s = (clock.virtual_s or 0.0) + sim.now_s - began
        return load.records

    # Warmed as a launched server is (its corpus and a burst of its requests), on the clock.
    send(warmup_plan(study.workload, study.model.vocab_size, o.trace), BURST_RPS)
    yield Target(virtual, None, clock, send)
