"""Hand-built readings the diagnosis, pruning and knee-reading tests share: catalogue GPUs
and models, a load point built from a signal set, and signal sets for each binding resource."""

from __future__ import annotations

from typing import Any

from kneepoint.config.catalog import gpu_catalogue, model_catalogue
from kneepoint.policies.diagnosis.bottleneck import diagnose
from kneepoint.policies.diagnosis.context import context_of
from kneepoint.records.diagnosis import Observation
from kneepoint.records.engine import EngineConfig
from kneepoint.records.loadpoint import LoadPoint, Signals
from kneepoint.records.measure import Dist

H100, A100, L40S = (gpu_catalogue()[n] for n in ("h100-sxm", "a100-80gb-sxm", "l40s"))
LLAMA_8B, LLAMA_1B = (model_catalogue()[n] for n in ("llama-3.1-8b", "llama-3.2-1b"))
GPM = ("sm_util_pct", "tensor_util_pct", "dram_bw_util_pct")
NVML = ("gpu_util_pct", "memory_util_pct")


def dist(p50: float, p99: float) -> Dist:
    return Dist(count=100, mean_ms=p50, p50_ms=p50, p90_ms=p99, p95_ms=p99, p99_ms=p99)


def point(
    signals: dict[str, Any],
    *,
    violations: tuple[str, ...] = ("c ttft_p99 1200 ms > 1000 ms",),
    itl: tuple[float, float] | None = None,
    achieved: float = 10.0,
    lag_ms: float = 0.5,
) -> LoadPoint:
    if itl is None:  # consistent with the step rate: a decode waits one step per token
        step_ms = 1000.0 / signals["steps_per_s"] if signals.get("steps_per_s") else 20.0
        itl = (step_ms, 1.5 * step_ms)
    return LoadPoint(
        rate_rps=10.0, window_start_s=0.0, window_end_s=60.0, sent=600, completed=600,
        failed=0, timed_out=0, achieved_rps=achieved, goodput_rps=achieved * 0.9,
        meets_slo=not violations, violations=violations,
        dists={"c": {"ttft": dist(200, 1200), "itl": dist(*itl), "tpot": dist(*itl),
                     "e2e": dist(3000, 6000)}},
        send_lag_p50_ms=lag_ms / 2, send_lag_p99_ms=lag_ms, client_bound=lag_ms >= 10.0,
        signals=Signals(**signals),
    )  # fmt: skip


def without(signals: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in signals.items() if k not in names}


def observe(signals: dict[str, Any], gpu: Any = H100, model: Any = LLAMA_8B, **kw: Any) -> Any:
    engine = EngineConfig(model=model.name, **kw.pop("engine", {}))
    return diagnose(context_of(Observation(saturated=point(signals, **kw), gpu=gpu, model=model,
                                engine=engine)))  # fmt: skip


# Prefill-heavy summarisation on an H100: full-budget chunks, few running, tensor cores busy.
COMPUTE = {
    "kv_usage_mean": 0.09, "running_mean": 13.0, "waiting_mean": 2.2, "preemptions_per_s": 0.0,
    "tokens_per_step_mean": 2300.0, "steps_per_s": 11.1, "generation_tokens_per_s": 80.0,
    "num_gpu_blocks": 28870, "block_size": 16, "gpu_util_pct": 94.0, "memory_util_pct": 13.0,
    "sm_util_pct": 88.0, "tensor_util_pct": 45.0, "dram_bw_util_pct": 6.5,
}  # fmt: skip
# Long answers decoding on an L40S: ~34 sequences, one token each per step, HBM streaming
# weights and KV; nothing queues (the ITL SLO fails first). The L40S has no GPM.
BANDWIDTH = {
    "kv_usage_mean": 0.18, "running_mean": 34.0, "waiting_mean": 0.0, "preemptions_per_s": 0.0,
    "tokens_per_step_mean": 58.0, "steps_per_s": 26.9, "generation_tokens_per_s": 920.0,
    "num_gpu_blocks": 12940, "block_size": 16, "gpu_util_pct": 100.0, "memory_util_pct": 100.0,
}  # fmt: skip
# The same traffic on an H100 with GPM: ~10 ms steps, HBM busy, tensor cores idle.
BANDWIDTH_H100 = {
    **BANDWIDTH, "steps_per_s": 95.0, "generation_tokens_per_s": 3230.0, "num_gpu_blocks": 28870,
    "sm_util_pct": 47.0, "tensor_util_pct": 2.0, "dram_bw_util_pct": 71.0,
}  # fmt: skip
# A KV pool pinned small under long contexts: full, a long queue, preemption churn.
CACHE = {
    "kv_usage_mean": 0.99, "kv_usage_max": 1.0, "running_mean": 39.0, "waiting_mean": 40.0,
    "preemptions_per_s": 34.0, "tokens_per_step_mean": 73.0, "steps_per_s": 263.0,
    "generation_tokens_per_s": 10080.0, "num_gpu_blocks": 2048, "block_size": 16,
    "gpu_util_pct": 100.0, "memory_util_pct": 94.0,
}  # fmt: skip
# A 1B model under a 32-sequence cap with sync scheduling: running pinned, KV empty, gaps.
CAPPED = {
    "kv_usage_mean": 0.003, "running_mean": 30.7, "waiting_mean": 14.6, "preemptions_per_s": 0.0,
    "tokens_per_step_mean": 62.0, "steps_per_s": 374.0, "generation_tokens_per_s": 11556.0,
    "num_gpu_blocks": 143207, "block_size": 16, "gpu_util_pct": 68.0, "memory_util_pct": 63.0,
    "sm_util_pct": 23.8, "tensor_util_pct": 6.1, "dram_bw_util_pct": 31.2,
}  # fmt: skip
# The same model with no cap in the way: steps far slower than their GPU work (CPU bound).
CPU_BOUND = {
    **CAPPED, "running_mean": 120.0, "waiting_mean": 30.0, "tokens_per_step_mean": 140.0,
    "steps_per_s": 190.0, "generation_tokens_per_s": 22800.0, "gpu_util_pct": 45.0,
    "sm_util_pct": 15.0, "tensor_util_pct": 4.0, "dram_bw_util_pct": 20.0,
}  # fmt: skip
