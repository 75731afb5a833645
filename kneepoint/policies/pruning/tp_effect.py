"""What a change of tensor-parallel size should do per GPU: the rule pruning asks when the
study gives one server several GPUs (``StudySpec.gpus``).

A wider server runs each step faster (its GEMMs and weight reads split across the GPUs, an
all-reduce added: the roofline prices both) and holds more KV tokens (each GPU keeps a share
of the weights), but costs more GPUs, so the objective is per GPU. The rule prices the next
size up and the next size down from the incumbent and proposes the better per GPU: for a
model whose KV pool is starved (Llama-3.1-70B at TP 2 on H100s keeps ~24k tokens) the wider
server gains per GPU; for one that fits (Llama-3.1-8B at TP 1 holds 455k) the narrower does
(``kneepoint plan`` on both: 2.09 -> 2.90 req/s per GPU from TP 2 to 4 on the 70B, 38.3 ->
35.1 from TP 1 to 2 on the 8B, simulated).
"""

from __future__ import annotations

from typing import NamedTuple

from kneepoint.physics import BatchShape, Roofline, drafter_free, resolve_engine
from kneepoint.policies.pruning.knob_effects import (
    MAX_RATIO,
    NOTHING_GAINED,
    Effect,
    Situation,
    damped,
    kv_ratio,
)


def tensor_parallel(sit: Situation) -> Effect | str:
    current = sit.engine.tensor_parallel_size
    sizes = sorted(c for c in sit.choices if isinstance(c, int) and not isinstance(c, bool))
    neighbours = [
        s
        for s in (
            [
                max((c for c in sizes if c < current), default=None),
                min((c for c in sizes if c > current), default=None),
            ]
        )
        if s is not None
    ]
    if not neighbours:
        return f"no other size fits the study's GPUs and the model's heads (at {current})"
    return best_per_gpu([_priced(sit, current, size) for size in neighbours])


def best_per_gpu(priced: list[Effect | str]) -> Effect | str:
    """The size that gains most per GPU, or why none is worth a move."""
    effects = [p for p in priced if isinstance(p, Effect)]
    if not effects:
        return "; ".join(str(p) for p in priced)
    best = max(effects, key=lambda e: e.ratio)
    if best.ratio < NOTHING_GAINED:
        return "; ".join(e.reason for e in effects) + ": no gain per GPU"
    return best


class Grown(NamedTuple):
    """What a server runs after a change: its KV pool and the batch it runs in today's step
    time, each over today's, and the throughput gain taken from them."""

    kv: float
    batch: float | None
    gain: float


def grown(sit: Situation, **changes: object) -> Grown | str:
    """The server after ``changes`` (why it would not start, if it would not)."""
    kv = kv_ratio(sit, **changes)
    if isinstance(kv, str):
        return kv
    batch = iso_latency_batch(sit, kv, **changes)
    return Grown(kv, batch, damped(kv) if batch is None else min(MAX_RATIO, batch))


def _priced(sit: Situation, current: int, size: int) -> Effect | str:
    found = grown(sit, tensor_parallel_size=size)
    if isinstance(found, str):
        return f"TP {current} -> {size}: {found}"
    kv, batch, gain = found
    gpus = size / current
    said = "" if batch is None else f"{batch:.2f}x the batch at today's step time, "
    per_gpu = gain / gpus
    reason = (
        f"TP {current} -> {size}: {said}the KV pool holds {kv:.2f}x the tokens, on "
        f"{gpus:g}x the GPUs: {per_gpu:.2f}x per GPU"
    )
    return Effect("to", per_gpu, reason, target=size)


def iso_latency_batch(sit: Situation, kv: float, **changes: object) -> float | None:
    """How many times today's running batch the server runs in today's step time after
    ``changes``, at most what its KV pool (``kv`` times today's) holds. The step time is the
    wall time, CPU-side work included: a server whose scheduling sets the step (Llama-3.1-8B
    at TP 8) runs the same batch as fast on half the GPUs. Under an SLO the step time is what
    the latency limits hold still, and the requests served grow with the batch: a
    bandwidth-bound step barely grows with
    its batch, so a faster one buys far more than its speed-up (the simulated 70B on H100s
    went 4.2 -> 11.6 req/s from TP 2 to 4 for a 1.7x faster step)."""
    est, obs = sit.estimate, sit.observation
    if est is None:
        return None
    signals = obs.saturated.signals
    running = max(signals.running_mean or 1.0, 1.0)
    per_request = (signals.tokens_per_step_mean or running) / running

    def shape(batch: float) -> BatchShape:
        n = max(1, round(batch))
        return BatchShape(
            num_requests=n,
            new_tokens=max(1, round(per_request * batch)),
            attention_pairs=batch * est.context_tokens,
            kv_tokens=round(batch * est.context_tokens),
            samples=n,
        )

    now = Roofline(obs.gpu, obs.model, sit.engine, obs.efficiency).step(shape(running)).wall_s
    changed = resolve_engine(drafter_free(obs.engine).replace(**changes), obs.gpu, obs.model)
    other = Roofline(obs.gpu, obs.model, changed, obs.efficiency)
    low, high = 0.0, _batch_bound(running, kv, signals.kv_usage_mean, changed.max_num_seqs)
    if other.step(shape(high)).wall_s <= now:
        return high / running
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if other.step(shape(mid)).wall_s <= now else (low, mid)
    return max(low, 1.0) / running


POOL_FULL = 0.9
"""A pool this full bounds the batch: vLLM admits no request it cannot hold blocks for."""


def _batch_bound(running: float, kv: float, usage: float | None, max_num_seqs: int) -> float:
    """The largest batch the other size holds: today's batch grown until its KV pool (``kv``
    times today's) is as full as a pool gets, and no more than max_num_seqs. Today's pool
    ~3% full bounds nothing: Llama-3.1-8B at TP 8 on H100s holds 4.5M tokens, and TP 4 still
    2.2M, ~4,000 chat requests (``kneepoint plan``)."""
    room = kv * POOL_FULL / max(usage or POOL_FULL, 1e-3)
    return max(running, min(running * room, float(max_num_seqs)))
