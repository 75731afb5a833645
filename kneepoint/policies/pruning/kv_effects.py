"""What sizing the KV pool should do: its memory fraction, or its bytes where the study sizes it
in bytes (``kv_cache_memory_bytes``, the knob of vLLM's CPU build). Priced by the memory
model (the KV tokens a change buys) and by the sequences the load at the knee wanted to run.
"""

from __future__ import annotations

import math

from kneepoint.policies.pruning.knob_effects import Effect, Situation, damped, kv_ratio
from kneepoint.records import mean_length_tokens

MAX_KV_GROWTH = 16
"""The largest jump a KV pool rule proposes at once."""


def memory_fraction(sit: Situation) -> Effect | str:
    if sit.observation.engine.kv_cache_memory_bytes is not None:
        return "the KV pool is sized in bytes (kv_cache_memory_bytes), which overrides it"
    current = sit.engine.gpu_memory_utilization
    # The coordinate walk's first step up from under the search's range lands on its floor:
    # price that move, not a step it will not take (a tune on an H200 from 0.17 read "0.17 ->
    # 0.21 gives +72%" and tried 0.80, tests/fixtures/real/h200-llama8b-kv-tune).
    target = round(min(0.96, max(current + 0.04, sit.floor or 0.0)), 2)
    if target <= current:
        return f"already at {current:.2f}, the top of its range"
    ratio = kv_ratio(sit, gpu_memory_utilization=target)
    if isinstance(ratio, str):
        return f"{current:.2f} -> {target:.2f}: {ratio}"
    reason = (
        f"{current:.2f} -> {target:.2f} gives the KV cache {ratio - 1:+.0%} tokens: more "
        "sequences fit before requests wait for blocks"
    )
    return Effect("up", damped(sequence_room(sit, ratio)), reason)


def memory_bytes(sit: Situation) -> Effect | str:
    current = sit.observation.engine.kv_cache_memory_bytes
    if current is None:
        return "the KV pool follows gpu_memory_utilization; that is the knob to move"
    factor, why = kv_growth(sit)
    ratio = kv_ratio(sit, kv_cache_memory_bytes=current * factor)
    while isinstance(ratio, str) and factor > 2:  # a pool that would not start: smaller
        factor //= 2
        ratio = kv_ratio(sit, kv_cache_memory_bytes=current * factor)
    if isinstance(ratio, str):
        return f"{factor}x the KV pool: {ratio}"
    held = sit.memory.kv_tokens / max(1.0, _sequence_tokens(sit))
    reason = (
        f"{factor}x the KV pool ({current / 2**30:.3f} -> "
        f"{current * factor / 2**30:.3f} GiB) holds ~{held * ratio:.0f} of the "
        f"workload's requests where it holds ~{held:.0f}: {why}"
    )
    # Damped, not priced by the server's step response: a starved pool's steps carry the
    # prefills of preempted sequences computed again, which grow its step time with its
    # tokens (the CPU build's read tokens^1.0 there) and buy nothing; a bigger pool's gain is
    # the recomputation it saves, and the sequences it lets run.
    gained = damped(sequence_room(sit, ratio))
    if factor == 2:
        return Effect("up", gained, reason)
    return Effect("to", gained, reason, target=current * factor)


def kv_growth(sit: Situation) -> tuple[int, str]:
    """How many times the KV pool to try, and why: where the pool holds fewer of the
    workload's requests than the running cap admits, the power of two (up to
    ``MAX_KV_GROWTH``) that holds the cap's worth; else twice. Doubling a pool far short of
    the cap buys a fraction of what holding the cap does: on the server of
    tests/fixtures/real/cpu-tiny-llama (16 MiB, ~21 of the cap's 128 requests held) twice the
    pool measured ~1.3x and 1 GiB 1.6-1.7x (``vllm bench serve``)."""
    held = sit.memory.kv_tokens / max(1.0, _sequence_tokens(sit))
    cap = sit.engine.max_num_seqs
    if cap <= 2 * held:
        return 2, "fewer waits for blocks and fewer preemptions"
    factor = min(MAX_KV_GROWTH, 2 ** math.ceil(math.log2(cap / held)))
    return factor, f"the running cap ({cap}) admits more than the pool holds"


def sequence_room(sit: Situation, kv_ratio_: float) -> float:
    """How many times the sequences running now could run in a pool ``kv_ratio_`` times the
    size, at most the running cap (what a bigger pool buys, before any other wall)."""
    running = max(1.0, sit.observation.saturated.signals.running_mean or 1.0)
    return min(kv_ratio_, sit.engine.max_num_seqs / running)


def _sequence_tokens(sit: Situation) -> float:
    """A typical request's KV tokens: its prompt and answer, in whole blocks; a
    conversation's turn with the history it carries (its requests grow turn by turn)."""
    workload = sit.observation.workload
    if workload is None:
        return float(sit.engine.block_size)
    total = sum(c.weight * c.mean_turns() for c in workload.classes)
    lengths = [
        (
            c.weight * c.mean_turns(),
            mean_length_tokens(c.input_tokens)
            + mean_length_tokens(c.output_tokens)
            + c.mean_history_tokens(),
        )
        for c in workload.classes
    ]
    tokens = sum(w * n for w, n in lengths) / total
    block = sit.engine.block_size
    return math.ceil(tokens / block) * block
