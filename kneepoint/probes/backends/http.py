"""A backend served over HTTP (``kneepoint sim serve``, a launched ``vllm serve``, an attached
server), opened as a target: warmed before its first point (its workload's corpus and a burst
of its requests, ``kneepoint.probes.client.warmup``), each load point planned and sent by the
load generator with its telemetry on the same clock, and a server that dies between load
points raised as ``ServerFailedError`` with the failure named, rather than measured as slow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from kneepoint.load import PlannedRequest, PointSize, Trust, plan_requests, point_seed, rate_salt
from kneepoint.probes.backends.base import (
    Backend,
    DeviceClock,
    Endpoint,
    Keep,
    Opening,
    Prober,
    Sender,
    Target,
    rejected,
)
from kneepoint.probes.backends.measure import Instruments, measure
from kneepoint.probes.client import LoadOptions, warm_up
from kneepoint.probes.server import ServerFailedError
from kneepoint.records import LoadPoint, PointArtifacts, RequestRecord, StudySpec, TraceEntry


def over_http(
    make: Callable[[Opening], Backend],
) -> Callable[[Opening], AbstractContextManager[Target]]:
    """An opener for a backend served over HTTP and driven by the load generator."""

    @contextmanager
    def opener(o: Opening) -> Iterator[Target]:
        clock = DeviceClock(o.config.gpu_count)
        try:
            with make(o).serve(o.config, o.trial_dir) as endpoint:
                warm_up(endpoint.url, o.study, _options(o.study, endpoint), o.trace)
                yield Target(
                    _http_prober(o.study, endpoint, o.size, o.trace, o.keep),
                    endpoint,
                    clock,
                    _http_sender(o.study, endpoint),
                )
        except ServerFailedError as exc:
            exc.held_s = clock.seconds()  # a start that failed held its GPUs while it tried
            raise

    return opener


def _options(study: StudySpec, endpoint: Endpoint) -> LoadOptions:
    client = study.workload.client
    return LoadOptions(
        model=endpoint.served_model,
        request_timeout_s=client.request_timeout_s,
        max_concurrency=client.max_concurrency,
        ignore_eos=client.ignore_eos,
        temperature=client.temperature,
        api_key=endpoint.api_key,
    )


def _http_sender(study: StudySpec, endpoint: Endpoint) -> Sender:
    def send(plan: Sequence[PlannedRequest], rate: float) -> tuple[RequestRecord, ...]:
        measured = measure(
            endpoint.url,
            plan,
            rate,
            _options(study, endpoint),
            study.slo,
            instruments=endpoint.instruments,
        )
        failure = endpoint.failure()
        if failure is not None:
            raise ServerFailedError(failure)
        return tuple(measured.records)

    return send


def _instruments(study: StudySpec, endpoint: Endpoint, attempt: int) -> Instruments:
    """The endpoint's instruments with the study's scrape schedule: its interval, else
    adaptive from 1 s; a retake scrapes half as often as the attempt before it (a lighter
    measurement on a host that could not tell)."""
    every = study.measurement.scrape_interval_s
    return dataclasses.replace(
        endpoint.instruments,
        scrape_interval_s=(every or 1.0) * 2**attempt,
        adaptive_scrapes=every is None,
    )


def _http_prober(
    study: StudySpec,
    endpoint: Endpoint,
    size: PointSize,
    trace: Sequence[TraceEntry],
    keep: Keep | None,
) -> Prober:
    options = _options(study, endpoint)
    trust = Trust.of(study.slo, study.measurement)

    def probe(rate: float, repeat: int, attempt: int = 0) -> LoadPoint:
        plan = plan_requests(
            study.workload,
            rate,
            num_requests=size.requests(rate),
            seed=point_seed(study.workload.seed, repeat, attempt),
            trace=trace,
            vocab_size=study.model.vocab_size,
            salt=rate_salt(rate, attempt),  # one live server: no prompt repeats an earlier one
        )
        measured = measure(
            endpoint.url,
            plan,
            rate,
            options,
            study.slo,
            instruments=_instruments(study, endpoint, attempt),
            trust=trust,
            warmup_s=size.warmup_s,
        )
        if keep is not None:
            keep(
                PointArtifacts(
                    rate, repeat, measured.point, measured.records, measured.metrics_text, attempt
                )
            )
        failure = endpoint.failure() or rejected(measured.records)
        if failure is not None:
            raise ServerFailedError(failure)
        return measured.point

    return probe
