"""What KV offloading to host memory (``--kv-offloading-size``) should do: prefill work saved
on the prefixes the device pool cannot keep.

vLLM's native connector stores every computed block in host memory too and loads a later
request's prefix back from it where the pool has evicted it. So it pays exactly where prompts
share prefixes (documents, agents' contexts) whose corpus outgrows the pool: the workload's
reuse model (``prefix_reuse``) says which share of prompt tokens the pool serves today and
which it would with the host's tokens beside it, and the prefill work they stand for is the
step's share the knee's own point shows (as prefix caching is priced). A load runs over the
PCIe link beside the steps (a request waits for its own, others run on), so it adds to the
loading request's time to first token, not to the steps; the rule says where loading a
token would take longer than computing it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import JsonValue

from kneepoint.policies.pruning.knob_effects import (
    MAX_RATIO,
    Effect,
    Situation,
    prefill_schedules,
)
from kneepoint.policies.pruning.prefix_savings import prefix_reuse
from kneepoint.records import GIB, Dist, Efficiency

ENOUGH = 0.98
"""The smallest size whose price is within 2% of the largest's is proposed: host memory is
not free either."""
POOL_FULL = 0.88
"""How full a pool runs, on average, at a knee it sets: fuller, requests queue for blocks
and the time-to-first-token tail breaks. document-qa with 64 GiB offloaded: the last rate
each of six validation repeats passed ran its pool 81-92% full (mean 87%), its sweep's knee
88%; the diagnosis reads a pool 90% full as the cache binding."""


def offloading(sit: Situation) -> Effect | str:
    engine, obs = sit.engine, sit.observation
    if not engine.enable_prefix_caching:
        return "prefix caching is off: the connector finds offloaded blocks by their hashes"
    if sit.binding == "scheduling" and not prefill_schedules(sit):
        return "it saves prefill work, and what binds is not prefills stalling decodes"
    workload, link = obs.workload, obs.gpu.host_link_gb_s
    if workload is None or link is None:
        return "no workload or host link to price it from"
    per_token = sit.memory.kv_bytes_per_token * engine.tensor_parallel_size
    pool = sit.memory.kv_tokens

    def share(host_bytes: float) -> float:
        host = host_bytes / per_token
        return prefix_reuse(
            workload, pool, block_tokens=engine.block_size, host_tokens=host
        ).prompt_share

    now = share(engine.kv_offloading_bytes)
    sizes = [c for c in sit.choices if _gib(c) * GIB > engine.kv_offloading_bytes]
    if not sizes:
        return "no larger offloading size to try"
    prefill = _prefill_share(sit)
    priced = [(_ratio(now, share(_gib(c) * GIB), prefill), c) for c in sizes]
    best = max(r for r, _ in priced)
    ratio, size = next((r, c) for r, c in priced if r >= ENOUGH * best)
    then = share(_gib(size) * GIB)
    said = (
        f"the pool of {pool:,} tokens serves {now:.0%} of prompt tokens from shared "
        f"prefixes; {_gib(size):g} GiB of host memory beside it would serve {then:.0%}"
    )
    if ratio <= 1.0:
        return f"{said}: nothing more to save"
    efficiency = obs.efficiency or Efficiency()
    load_us = per_token / (link * 1e9 * efficiency.host_link)
    reason = (
        f"{said}, loaded over the {link:g} GB/s host link at ~{load_us * 1e6:.1f} us a "
        f"token instead of computed ({prefill:.0%} of the step's tokens are prefill): "
        f"step work {1 / ratio - 1:+.0%}"
    )
    pool_cap = _pool_ceiling(sit)
    if pool_cap is not None and pool_cap[0] < ratio:
        ratio, reason = max(1.0, pool_cap[0]), f"{reason}; capped at {pool_cap[1]}"
    return Effect("to", min(MAX_RATIO, ratio), reason, target=size)


def _pool_ceiling(sit: Situation) -> tuple[float, str] | None:
    """The most faster prefills can serve where the pool holds the batch: offloading adds
    no device KV, so the batch grows at most to what the pool holds at an SLO knee
    (``POOL_FULL``), and each request holds its blocks shorter by the prefill it no longer
    computes (its time to first token less its wait in the queue, Little's law's
    waiting over rate). The real H200 document-qa server (tests/fixtures/real/
    h200-llama8b-docqa): at the knee 5.5 sequences in a pool 55% full, 1.69 s a request,
    TTFT 0.29 s of which 0.08 s queued; with 64 GiB offloaded 1.92x the SLO capacity, each
    request holding its blocks 1.08 s. Holding them as long as before priced 1.61x;
    shortened, 1.84x."""
    below = sit.observation.below
    if below is None:
        return None
    signals = below.signals
    running, usage = signals.running_mean or 0.0, signals.kv_usage_mean or 0.0
    if running <= 0.0 or usage <= 0.0 or usage >= POOL_FULL:
        return None
    hold_s = running / below.rate_rps
    queued_s = (signals.waiting_mean or 0.0) / below.rate_rps
    saved_s = max(0.0, min(_ttft_mean_s(below.dists), hold_s / 2) - queued_s)
    held = POOL_FULL / usage * hold_s / (hold_s - saved_s)
    words = (
        f"{held:.2f}x: the pool, {usage:.0%} full at {below.rate_rps:.4g} req/s, holds "
        f"{POOL_FULL / usage:.2f}x the batch at the {POOL_FULL:.0%} a pool-bound knee runs "
        f"it, each request {hold_s:.2f} -> {hold_s - saved_s:.2f} s without its prefill"
    )
    return held, words


def _ttft_mean_s(dists: Mapping[str, Mapping[str, Dist]]) -> float:
    """The point's mean time to first token over its classes, by their counts."""
    ttfts = [d["ttft"] for d in dists.values() if "ttft" in d and math.isfinite(d["ttft"].mean_ms)]
    count = sum(t.count for t in ttfts)
    return sum(t.mean_ms * t.count for t in ttfts) / count / 1000.0 if count else 0.0


def _gib(choice: JsonValue) -> float:
    return (
        float(choice) if isinstance(choice, int | float) and not isinstance(choice, bool) else 0.0
    )


def _prefill_share(sit: Situation) -> float:
    """The share of the knee's step tokens that are prompt (those offloading can save)."""
    signals = sit.observation.saturated.signals
    tokens = signals.tokens_per_step_mean or 0.0
    decodes = (signals.generation_tokens_per_s or 0.0) / (signals.steps_per_s or 1.0)
    return max(0.0, tokens - decodes) / tokens if tokens else 0.5


def _ratio(now: float, then: float, prefill: float) -> float:
    """Throughput ratio when ``then`` rather than ``now`` of prompt tokens come from caches,
    ``prefill`` of the step being prompt tokens computed today."""
    computed_now = 1.0 - now
    if computed_now <= 0.0:
        return 1.0
    saved = (then - now) / computed_now  # of the prompt tokens computed today
    return 1.0 / max(0.05, 1.0 - saved * prefill)
