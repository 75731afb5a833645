"""Whether a load point can tell what it measured, or only that it could not.

Three things make a point unable to tell, and each is judged where the evidence is sound on a
busy host (a 2-core machine where the load generator, vLLM's API server and its engine share
the cores, as they share a GPU host's CPUs):

- **The client fell behind.** Latencies count from each request's scheduled send, so a late
  send lengthens them: a point that met its SLO in spite of its late sends met it (and the
  late sends only bunched its load), so it counts. A point that missed it counts as a miss
  only if it misses even with latencies counted from the actual sends, and the server's own
  histograms do not say it met the SLO (a client starved of CPU reads its answers late too:
  on the CPU recordings one read a TTFT p99 of 1,820 ms from the schedule and 897 ms from
  the send where vLLM's histogram read 74 ms); otherwise the client decided the verdict and
  the point is *client-bound*. How late is late, and what
  share of late sends makes a point's schedule untrustworthy, are study fields
  (``MeasurementSpec``); on the CPU recordings (tests/fixtures/real/cpu-tiny-llama) the send
  lag's median was 1-2 ms and its p99 0.1-2 s, so a p99 says only that a few sends stalled.
- **The server's counts describe another load** (another server behind the URL, metrics from
  the wrong window): Little's law. From vLLM's e2e latency histogram, read before and after
  the point, where it has one: its latencies summed over the client's (send to end) for the
  same requests. Else from the running and waiting gauges, and only where enough of the
  scrapes due landed: a busy API server answers scrapes between bursts, so the few that land
  read it idler than it was. Judged on points that met their SLO, where the queue is steady.
- **Something else held the host's CPUs.** Linux's pressure stall information says what share
  of the point some runnable task waited for a CPU, and the host's CPU accounting how much of
  it went to work outside the measurement (``kneepoint.probes.telemetry.cpu``); past both
  ``max_host_cpu_pressure`` and ``max_host_other_cores`` the point measured the host, whatever
  it met or missed. Pressure alone cannot tell: on two cores the measurement's own tasks queue
  behind each other. On a GPU, another process that ran on it (NVML) voids the point too.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from kneepoint.load.origin import LatencyFrom
from kneepoint.load.scoring import percentile
from kneepoint.records import Dist, MeasurementSpec, RequestRecord, Signals, Slo

DEFAULT_LATE_SEND_MS = 10.0
LATE_SHARE_OF_SLO = 0.05
"""A send later than this share of the tightest TTFT/e2e limit is late: below it, a late send
cannot move a request across its limit by more than the measurement's own noise does."""
_DEFAULTS = MeasurementSpec()


@dataclass(frozen=True, slots=True)
class Trust:
    """The rules a load point is judged by (``MeasurementSpec`` resolved for one SLO)."""

    late_send_ms: float = DEFAULT_LATE_SEND_MS
    late_send_share: float = _DEFAULTS.late_send_share
    littles_law_tolerance: float = _DEFAULTS.littles_law_tolerance
    min_scrape_share: float = _DEFAULTS.min_scrape_share
    max_host_cpu_pressure: float = _DEFAULTS.max_host_cpu_pressure
    max_host_other_cores: float = _DEFAULTS.max_host_other_cores
    latency_from: LatencyFrom = _DEFAULTS.latency_from
    max_backlog_growth: float | None = _DEFAULTS.max_backlog_growth

    @classmethod
    def of(cls, slo: Slo | None, spec: MeasurementSpec = _DEFAULTS) -> Trust:
        late = spec.late_send_ms if spec.late_send_ms is not None else default_late_ms(slo)
        return cls(
            late,
            spec.late_send_share,
            spec.littles_law_tolerance,
            spec.min_scrape_share,
            spec.max_host_cpu_pressure,
            spec.max_host_other_cores,
            spec.latency_from,
            spec.max_backlog_growth,
        )

    def host_busy(self, signals: Signals) -> bool:
        """Whether another process ran on the GPU, or the host's CPU pressure over the point
        and the CPU other work took say it measured the host (where others' CPU is unread,
        the pressure alone decides)."""
        if signals.gpu_other_processes:
            return True  # another process's kernels share the GPU's SMs and bandwidth
        pressure, others = signals.host_cpu_pressure, signals.host_cpu_others_cores
        if pressure is None or pressure <= self.max_host_cpu_pressure:
            return False
        return others is None or others > self.max_host_other_cores


def default_late_ms(slo: Slo | None) -> float:
    """5% of the tightest limit a late send moves (TTFT and e2e count from the schedule; ITL
    and TPOT do not see the send), at least 10 ms; 10 ms without such a limit."""
    if slo is None:
        return DEFAULT_LATE_SEND_MS
    sets = [*slo.classes.values(), *([slo.default] if slo.default is not None else [])]
    moved = [
        v
        for limits in sets
        for (metric, _), v in limits.limits_ms().items()
        if metric in ("ttft", "e2e")
    ]
    return (
        max(DEFAULT_LATE_SEND_MS, LATE_SHARE_OF_SLO * min(moved))
        if moved
        else (DEFAULT_LATE_SEND_MS)
    )


def late_share(window: Sequence[RequestRecord], late_ms: float) -> float:
    """Share of the window's sends later than ``late_ms`` behind their schedule."""
    if not window:
        return 0.0
    return sum(r.client_lag_s * 1000.0 > late_ms for r in window) / len(window)


def send_lags_ms(window: Sequence[RequestRecord]) -> tuple[float, float]:
    """The window's send lag at p50 and p99, in ms (0 for an empty window)."""
    lags = [max(0.0, r.client_lag_s) * 1000.0 for r in window]
    return (percentile(lags, 50), percentile(lags, 99)) if lags else (0.0, 0.0)


def meets_from_sends(
    window: Sequence[RequestRecord], slo: Slo | None, dists: dict[str, dict[str, Dist]]
) -> bool:
    """Whether the window meets its SLO with TTFT and e2e counted from each request's actual
    send (its client lag forgiven); ITL and TPOT are the point's own, which no send moves."""
    if slo is None:
        return all(r.ok for r in window)
    for name, by_metric in dists.items():
        limits = slo.for_class(name)
        mine = [r for r in window if r.traffic_class == name]
        for (metric, pct), limit in (limits.limits_ms() if limits else {}).items():
            if metric in ("ttft", "e2e"):
                value = percentile([_from_send(r, metric) for r in mine], pct)
            else:
                value = by_metric[metric].at(pct)
            if not value <= limit:
                return False
    return True


def server_meets(slo: Slo | None, signals: Signals) -> bool | None:
    """Whether the server's own histograms (``Signals.server_latency``) meet every limit of
    the SLO, each held to the tightest class's; None where they cannot say (no SLO, or a
    limited metric the server does not export)."""
    if slo is None or not signals.server_latency:
        return None
    sets = [*slo.classes.values(), *([slo.default] if slo.default is not None else [])]
    for limits in sets:
        for (metric, pct), limit in limits.limits_ms().items():
            dist = signals.server_latency.get(metric)
            if dist is None:
                return None
            if not dist.at(pct) <= limit:
                return False
    return True


def _from_send(rec: RequestRecord, metric: str) -> float:
    latency = rec.ttft_ms if metric == "ttft" else rec.e2e_ms
    return latency - max(0.0, rec.client_lag_s) * 1000.0


def concurrency_ratio(
    records: Sequence[RequestRecord],
    window: Sequence[RequestRecord],
    signals: Signals,
    achieved_rps: float,
    trust: Trust,
) -> float | None:
    """The server's concurrency over the client's (Little's law), from the server's e2e
    histogram where it has one, else from its gauges where enough scrapes landed; None where
    neither can say."""
    if signals.server_e2e_sum_s is not None and signals.server_requests:
        client = sum(r.end_s - r.sent_s for r in records if r.ok and r.end_s is not None)
        return signals.server_e2e_sum_s / client if client > 0 else None
    if signals.scrape_share is not None and signals.scrape_share < trust.min_scrape_share:
        return None
    latencies = [r.end_s - r.scheduled_s for r in window if r.ok and r.end_s is not None]
    if signals.running_mean is None or not latencies or achieved_rps <= 0:
        return None
    expected = achieved_rps * statistics.fmean(latencies)
    measured = signals.running_mean + (signals.waiting_mean or 0.0)
    return measured / expected if expected > 0 else None


def off_by(ratio: float | None, trust: Trust) -> bool:
    """Whether a concurrency ratio strays past the tolerance."""
    tol = trust.littles_law_tolerance
    return ratio is not None and not 1 / tol <= ratio <= tol
