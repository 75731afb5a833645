"""Signals over a load point's stable window, from scrapes and GPU samples on its clock.

Gauges are averaged over the scrapes inside the window; counters become rates between the
scrapes that bracket it; histograms are differenced the same way (tokens per step is the
mean of ``iteration_tokens_total`` over the window). GPU samples are weighted by how much of
each falls inside the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean

from kneepoint.probes.telemetry.prom import Scrape, quantile
from kneepoint.records import Dist, GpuSample, Signals, SpecReading
from kneepoint.sim import CLOCK_LAG_LIMIT_S

_GPU_FIELDS = (
    "gpu_util_pct",
    "memory_util_pct",
    "sm_util_pct",
    "tensor_util_pct",
    "dram_bw_util_pct",
    "power_w",
)


def _bracket(scrapes: Sequence[Scrape], start: float, end: float) -> tuple[Scrape, Scrape] | None:
    """The last scrape at or before ``start`` (else the first) and the first at or after
    ``end`` (else the last): the widest honest view of the window."""
    if len(scrapes) < 2:
        return None
    before = [s for s in scrapes if s.at_s <= start]
    after = [s for s in scrapes if s.at_s >= end]
    first = before[-1] if before else scrapes[0]
    last = after[0] if after else scrapes[-1]
    return (first, last) if last.at_s > first.at_s else None


def _rate(pair: tuple[Scrape, Scrape] | None, name: str) -> float | None:
    if pair is None:
        return None
    a, b = pair[0].value(name), pair[1].value(name)
    if a is None or b is None:
        return None
    return max(0.0, b - a) / (pair[1].at_s - pair[0].at_s)


def _mean(scrapes: Sequence[Scrape], name: str) -> float | None:
    values = [v for s in scrapes if (v := s.value(name)) is not None]
    return fmean(values) if values else None


def _max(scrapes: Sequence[Scrape], name: str) -> float | None:
    values = [v for s in scrapes if (v := s.value(name)) is not None]
    return max(values) if values else None


def _ratio_of_deltas(pair: tuple[Scrape, Scrape] | None, num: str, den: str) -> float | None:
    top, bottom = _rate(pair, num), _rate(pair, den)
    return min(1.0, top / bottom) if top is not None and bottom else None


def _steps(pair: tuple[Scrape, Scrape] | None) -> tuple[float | None, float | None]:
    """Mean tokens per engine step and steps per second, from the tokens-per-step histogram
    (one observation per step)."""
    if pair is None:
        return None, None
    a, b = pair[0].histogram("iteration_tokens"), pair[1].histogram("iteration_tokens")
    if a is None or b is None:
        return None, None
    delta = b.minus(a)
    return delta.mean, delta.count / (pair[1].at_s - pair[0].at_s)


def _late_share(pair: tuple[Scrape, Scrape] | None) -> float | None:
    """Share of the window's steps whose tokens the simulator sent more than
    ``CLOCK_LAG_LIMIT_S`` behind its own clock (None from anything but ``kneepoint sim serve``)."""
    if pair is None:
        return None
    a, b = pair[0].histogram("sim_clock_lag"), pair[1].histogram("sim_clock_lag")
    if a is None or b is None:
        return None
    delta = b.minus(a)
    on_time = dict(delta.buckets).get(CLOCK_LAG_LIMIT_S)
    if on_time is None or delta.count <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - on_time / delta.count))


def _server_e2e(scrapes: Sequence[Scrape]) -> tuple[float | None, float | None]:
    """(the server's e2e latencies summed, their count) between the first and the last
    scrape, which bracket the whole load; (None, None) without vLLM's e2e histogram."""
    if len(scrapes) < 2:
        return None, None
    first, last = scrapes[0].histogram("e2e"), scrapes[-1].histogram("e2e")
    if first is None or last is None:
        return None, None
    delta = last.minus(first)
    return (max(0.0, delta.sum), max(0.0, delta.count)) if delta.count >= 0 else (None, None)


def _server_latency(scrapes: Sequence[Scrape]) -> dict[str, Dist]:
    """The server's TTFT, ITL and e2e over the whole load, from its histograms' deltas
    between the first and the last scrape (metrics it does not export are left out)."""
    found: dict[str, Dist] = {}
    if len(scrapes) < 2:
        return found
    for metric in ("ttft", "itl", "e2e"):
        first, last = scrapes[0].histogram(metric), scrapes[-1].histogram(metric)
        if first is None or last is None:
            continue
        delta = last.minus(first)
        if delta.count < 1 or delta.mean is None:
            continue
        quantiles = {q: (quantile(delta, q / 100) or 0.0) * 1000.0 for q in (50, 90, 95, 99)}
        found[metric] = Dist(
            count=round(delta.count),
            mean_ms=delta.mean * 1000.0,
            p50_ms=quantiles[50],
            p90_ms=quantiles[90],
            p95_ms=quantiles[95],
            p99_ms=quantiles[99],
        )
    return found


def _speculation(pair: tuple[Scrape, Scrape] | None) -> SpecReading | None:
    """Speculative decoding's counters differenced over the window (None where the server
    exports none; no drafts where it verified none: the traffic gave no draft to look up)."""
    if pair is None:
        return None
    first, last = pair
    deltas = {}
    for name in ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens", "generation_tokens"):
        a, b = first.value(name), last.value(name)
        if a is None or b is None:
            return None
        deltas[name] = max(0.0, b - a)
    drafts = deltas["spec_drafts"]
    before = first.by_label("spec_accepted_by_position", "position")
    after = last.by_label("spec_accepted_by_position", "position")
    positions = sorted(int(p) for p in after if p.isdigit())
    shares = tuple(
        min(1.0, max(0.0, after[str(p)] - before.get(str(p), 0.0)) / drafts) if drafts else 0.0
        for p in positions
    )
    return SpecReading(
        drafts=drafts,
        draft_tokens=deltas["spec_draft_tokens"],
        accepted_tokens=deltas["spec_accepted_tokens"],
        generated_tokens=deltas["generation_tokens"],
        accepted_by_position=shares,
    )


def _cache_config(scrapes: Sequence[Scrape]) -> dict[str, str]:
    for scrape in reversed(scrapes):
        labels = scrape.labels("cache_config")
        if labels:
            return labels
    return {}


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(float(labels[key]))
    except (KeyError, ValueError):
        return None


def _gpu_means(samples: Sequence[GpuSample], start: float, end: float) -> dict[str, float]:
    weights = [max(0.0, min(s.end_s, end) - max(s.start_s, start)) for s in samples]
    means: dict[str, float] = {}
    for field in _GPU_FIELDS:
        pairs = [(getattr(s, field), w) for s, w in zip(samples, weights, strict=True)]
        pairs = [(v, w) for v, w in pairs if v is not None and w > 0]
        total = sum(w for _, w in pairs)
        if total > 0:
            mean = sum(v * w for v, w in pairs) / total
            # A weighted mean of readings all at 100% can round to 100.00000000000001 (seen
            # on a real H100 at full load), which the record's 0-100 bound refuses.
            means[field] = mean if field == "power_w" else min(100.0, mean)
    return means


def summarize_signals(
    scrapes: Sequence[Scrape],
    gpu: Sequence[GpuSample],
    start_s: float,
    end_s: float,
    *,
    engine_cpu_pct: float | None = None,
    frontend_cpu_pct: float | None = None,
    host_idle_cores: float | None = None,
    engine_cores_bound: int | None = None,
    host_cpu_pressure: float | None = None,
    host_cpu_others_cores: float | None = None,
    gpu_other_processes: int | None = None,
    scrape_share: float | None = None,
) -> Signals:
    """``scrape_share``: the sampler's share of the scrapes due in the window that landed."""
    inside = [s for s in scrapes if start_s <= s.at_s <= end_s] or list(scrapes)
    pair = _bracket(scrapes, start_s, end_s)
    config = _cache_config(scrapes)
    kv_mean, kv_max = _mean(inside, "kv_cache_usage"), _max(inside, "kv_cache_usage")
    in_window = [s for s in gpu if s.end_s > start_s and s.start_s < end_s]
    tokens_per_step, steps_per_s = _steps(pair)
    e2e_sum, e2e_count = _server_e2e(scrapes)
    return Signals(
        kv_usage_mean=min(1.0, kv_mean) if kv_mean is not None else None,
        kv_usage_max=min(1.0, kv_max) if kv_max is not None else None,
        running_mean=_mean(inside, "running"),
        running_max=_max(inside, "running"),
        waiting_mean=_mean(inside, "waiting"),
        preemptions_per_s=_rate(pair, "preemptions"),
        prefix_hit_rate=_ratio_of_deltas(pair, "prefix_cache_hits", "prefix_cache_queries"),
        external_hit_rate=_ratio_of_deltas(pair, "external_hits", "external_queries"),
        tokens_per_step_mean=tokens_per_step,
        steps_per_s=steps_per_s,
        prompt_tokens_per_s=_rate(pair, "prompt_tokens"),
        generation_tokens_per_s=_rate(pair, "generation_tokens"),
        num_gpu_blocks=_int_label(config, "num_gpu_blocks"),
        block_size=_int_label(config, "block_size"),
        engine_cpu_pct=engine_cpu_pct,
        frontend_cpu_pct=frontend_cpu_pct,
        host_idle_cores=host_idle_cores,
        engine_cores_bound=engine_cores_bound,
        host_cpu_pressure=host_cpu_pressure,
        host_cpu_others_cores=host_cpu_others_cores,
        gpu_other_processes=gpu_other_processes,
        sim_clock_late_share=_late_share(pair),
        server_e2e_sum_s=e2e_sum,
        server_requests=e2e_count,
        server_latency=_server_latency(scrapes),
        speculation=_speculation(pair),
        scrape_share=scrape_share,
        metric_samples=len(inside),
        gpu_samples=len(in_window),
        **_gpu_means(in_window, start_s, end_s),
    )
