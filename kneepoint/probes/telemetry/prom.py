"""vLLM's Prometheus ``/metrics``: parsed with prometheus_client, named across versions.

A ``Scrape`` is one parse of the text at a time on the load point's clock: every sample
summed over its label sets (engines, finish reasons), histograms kept as sum, count and
cumulative buckets, and the ``*_info`` gauges' labels. Code asks by canonical name
(``kv_cache_usage``); the aliases map that to whichever name this vLLM version exports
(``vllm:kv_cache_usage_perc``, or ``vllm:gpu_cache_usage_perc`` before it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Canonical name -> exported family names, newest first.
ALIASES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "preemptions": ("vllm:num_preemptions", "vllm:num_preemptions_total"),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    # a KV connector's (offloading's) prefix cache, in tokens
    "external_queries": ("vllm:external_prefix_cache_queries",),
    "external_hits": ("vllm:external_prefix_cache_hits",),
    "request_success": ("vllm:request_success",),
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue_time": ("vllm:request_queue_time_seconds",),
    "iteration_tokens": ("vllm:iteration_tokens_total",),
    "cache_config": ("vllm:cache_config_info",),
    # speculative decoding's counters (prometheus_client names a counter's family without
    # its _total; either spelling is found)
    "spec_drafts": ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total"),
    "spec_draft_tokens": (
        "vllm:spec_decode_num_draft_tokens",
        "vllm:spec_decode_num_draft_tokens_total",
    ),
    "spec_accepted_tokens": (
        "vllm:spec_decode_num_accepted_tokens",
        "vllm:spec_decode_num_accepted_tokens_total",
    ),
    "spec_accepted_by_position": (
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    ),
    "sim_clock_lag": ("kneepoint:sim_clock_lag_seconds",),  # kneepoint sim serve only
}
# Gauges whose engines' values are averaged rather than summed.
_MEAN_GAUGES = {"kv_cache_usage"}


@dataclass(frozen=True, slots=True)
class Histogram:
    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...]
    """(upper bound, cumulative count), ascending, +Inf last."""

    def minus(self, earlier: Histogram) -> Histogram:
        past = dict(earlier.buckets)
        buckets = tuple((le, n - past.get(le, 0.0)) for le, n in self.buckets)
        return Histogram(self.sum - earlier.sum, self.count - earlier.count, buckets)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True, slots=True)
class Scrape:
    at_s: float
    values: dict[str, list[float]] = field(default_factory=dict)
    """Family name -> one value per label set (counters and gauges)."""
    histograms: dict[str, Histogram] = field(default_factory=dict)
    info: dict[str, dict[str, str]] = field(default_factory=dict)
    labelled: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    """Family name -> each sample's labels and value (counters and gauges)."""

    def _family(self, canonical: str, table: Mapping[str, object]) -> str | None:
        for name in ALIASES.get(canonical, (canonical,)):
            if name in table:
                return name
        return None

    def value(self, canonical: str) -> float | None:
        name = self._family(canonical, self.values)
        if name is None:
            return None
        values = self.values[name]
        return sum(values) / len(values) if canonical in _MEAN_GAUGES else sum(values)

    def by_label(self, canonical: str, label: str) -> dict[str, float]:
        """The family's values by one label's value, summed over the other labels (the
        engines): ``{"0": 812.0, "1": 540.0}`` for ``position``."""
        name = self._family(canonical, self.labelled)
        found: dict[str, float] = {}
        for labels, value in self.labelled.get(name or "", []):
            if label in labels:
                found[labels[label]] = found.get(labels[label], 0.0) + value
        return found

    def histogram(self, canonical: str) -> Histogram | None:
        name = self._family(canonical, self.histograms)
        return self.histograms[name] if name else None

    def labels(self, canonical: str) -> dict[str, str] | None:
        name = self._family(canonical, self.info)
        return self.info[name] if name else None


def parse_metrics(text: str, at_s: float = 0.0) -> Scrape:
    """Parse Prometheus text exposition (raises ValueError on malformed text). A NaN or
    infinite value is no reading: that sample is dropped, and a histogram holding one is
    dropped whole (the text format allows them; a server that sends them must cost its
    signals, not the run)."""
    scrape = Scrape(at_s)
    for family in text_string_to_metric_families(text):
        name = family.name
        if family.type == "histogram":
            if (hist := _histogram(family.samples, name)) is not None:
                scrape.histograms[name] = hist
        elif family.type in ("counter", "gauge", "unknown", "info"):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                if name.endswith("_info") or family.type == "info":
                    scrape.info[name] = dict(sample.labels)
                if math.isfinite(sample.value):
                    scrape.values.setdefault(name, []).append(float(sample.value))
                    scrape.labelled.setdefault(name, []).append(
                        (dict(sample.labels), float(sample.value))
                    )
    return scrape


def _histogram(samples: Sequence[Sample], name: str) -> Histogram | None:
    total = count = 0.0
    buckets: dict[float, float] = {}
    for sample in samples:
        value = float(sample.value)
        if not math.isfinite(value):
            return None
        if sample.name == f"{name}_sum":
            total += value
        elif sample.name == f"{name}_count":
            count += value
        elif sample.name == f"{name}_bucket":
            le = float(sample.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    return Histogram(total, count, tuple(sorted(buckets.items())))


def quantile(hist: Histogram, q: float) -> float | None:
    """Linear interpolation inside the bucket holding the q-quantile, as PromQL does."""
    if hist.count <= 0:
        return None
    rank, lower, below = q * hist.count, 0.0, 0.0
    for le, cumulative in hist.buckets:
        if cumulative >= rank:
            if math.isinf(le):
                return lower
            inside = cumulative - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = le, cumulative
    return lower
