"""What changing one knob should do against the binding constraint, and why.

Each knob has a rule: given the situation (the diagnosis, the incumbent resolved with its
engine defaults, its memory plan and the roofline of the observed step) it returns either an
``Effect`` (which way to move it, the value to try, the expected capacity ratio and the reason)
or the reason it cannot help now. Sizes come from the same physics the simulator runs where it
can price the change (KV tokens a memory knob buys, step time an fp8 knob saves); elsewhere
they are deliberately modest guesses, and the report compares every guess with the result.
Weight quantization's rule is in ``quant_effects``, the KV pool's size in ``kv_effects``, the
batch a step takes (sequences, tokens, prefill chunks) in ``batch_effects``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from pydantic import JsonValue

from kneepoint.physics import (
    BatchShape,
    MemoryPlan,
    ResolvedEngine,
    Roofline,
    drafter_free,
    plan_memory,
    resolve_engine,
)
from kneepoint.policies.diagnosis import StepEstimate
from kneepoint.policies.pruning.prefix_savings import prefix_reuse
from kneepoint.records import Constraint, Diagnosis, Direction, EngineConfig, Observation

# Capacity rarely grows as fast as the resource a knob adds: queueing, other walls and
# the tail of the SLO take a share. Ratios of raw resource are damped by this power.
DAMPING = 0.6
MAX_RATIO = 2.5
NOTHING_GAINED = 1.02
"""A predicted ratio below this is no move: it is inside the run-to-run noise of one
configuration (real H100 repeats of one config spread ~2% in capacity, tests/fixtures/real)."""


@dataclass(frozen=True, slots=True)
class Situation:
    """Everything a knob rule may read."""

    diagnosis: Diagnosis
    observation: Observation
    engine: ResolvedEngine
    memory: MemoryPlan
    estimate: StepEstimate | None
    shared_prefixes: bool
    choices: tuple[JsonValue, ...] = ()
    """The asked knob's choices that can be tried here (a choice domain's, narrowed by the
    choices' needs); empty for other domains."""
    floor: float | None = None
    """The asked knob's numeric domain's lowest value: an up move from below it lands there
    (a study may start under the search's range: gpu_memory_utilization 0.3 under 0.80)."""

    @property
    def binding(self) -> Constraint:
        constraint = self.diagnosis.constraint
        assert constraint is not None  # pruning only asks rules under a named constraint
        return constraint


class _Unset:
    """No value given: a ``to`` move then tries the first choice unlike the incumbent's."""


UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class Effect:
    direction: Direction
    ratio: float
    reason: str
    target: object = UNSET
    """The value a ``to`` move tries (None is a value: a choice switched off)."""


Rule = Callable[[Situation], "Effect | str"]


def aimed_at(situation: Situation, target: Constraint) -> Situation:
    """The situation as if ``target`` bound (a runner-up's rule, an inconclusive verdict's)."""
    diagnosis = situation.diagnosis.model_copy(update={"binding": target})
    return replace(situation, diagnosis=diagnosis)


def if_bound(
    acts_on: Sequence[Constraint], rule: Rule | None, situation: Situation
) -> Iterator[tuple[Constraint, Effect | str]]:
    """What ``rule`` says were each constraint a knob acts on to bind, the runner-up first
    (the one the ruled-out reason quotes), then the others in the knob's order."""
    if rule is None:
        return
    runner = situation.diagnosis.runner_up
    for constraint in sorted(acts_on, key=lambda c: c != runner):
        yield constraint, rule(aimed_at(situation, constraint))


def damped(resource_ratio: float) -> float:
    return float(min(MAX_RATIO, max(0.5, resource_ratio**DAMPING)))


def sped_up(sit: Situation, step_speedup: float) -> float:
    """Capacity ratio of a step that runs ``step_speedup`` times faster. Where the server's
    own points show it throughput-bound (step time growing as fast as its batch, elasticity
    >= 1) its knee moves with its speed; below that, by the damped share. On the real H100
    base recording (elasticity 1.23) the roofline priced fp8 weights' step at 1.08x and the
    knee moved 1.10x; damped, the prediction was 1.04x (tests/fixtures/real)."""
    response = sit.observation.response
    power = DAMPING if response is None else min(1.0, max(DAMPING, response.elasticity))
    return float(min(MAX_RATIO, max(0.5, step_speedup**power)))


def kv_ratio(sit: Situation, **changes: object) -> float | str:
    """KV tokens after a change over KV tokens now, or why the change would not start."""
    obs = sit.observation
    config = drafter_free(obs.engine).replace(**changes)
    plan = plan_memory(obs.gpu, obs.model, resolve_engine(config, obs.gpu, obs.model))
    if plan.refusal is not None:
        return f"it would not start ({plan.refusal.kind.replace('_', ' ')})"
    return plan.kv_tokens / max(1, sit.memory.kv_tokens)


def step_ratio(sit: Situation, config: EngineConfig) -> float | None:
    """Observed-step GPU time now over after the change (throughput per step gained)."""
    est, obs = sit.estimate, sit.observation
    if est is None:
        return None
    signals = obs.saturated.signals
    tokens, running = signals.tokens_per_step_mean or 1.0, max(signals.running_mean or 1.0, 1.0)
    shape = BatchShape(
        num_requests=round(running),
        new_tokens=max(1, round(tokens)),
        attention_pairs=running * est.context_tokens,
        kv_tokens=round(running * est.context_tokens),
        samples=round(running),
    )
    before = Roofline(obs.gpu, obs.model, sit.engine, obs.efficiency).step(shape).gpu_s
    changed = resolve_engine(drafter_free(config), obs.gpu, obs.model)
    after = Roofline(obs.gpu, obs.model, changed, obs.efficiency).step(shape)
    return before / after.gpu_s


def kv_dtype(sit: Situation) -> Effect | str:
    current = sit.observation.engine.kv_cache_dtype or "auto"
    if current.startswith("fp8"):
        return f"the KV cache is already {current}"
    if sit.binding == "cache":
        reason = "fp8 KV halves bytes per token: twice the tokens fit in the same pool"
        return Effect("to", damped(2.0), reason + " (changes outputs slightly)", target="fp8")
    ratio = step_ratio(sit, sit.observation.engine.replace(kv_cache_dtype="fp8")) or 1.2
    reason = f"fp8 KV halves the KV bytes decode reads: the step runs {ratio:.2f}x faster"
    return Effect("to", sped_up(sit, ratio), reason, target="fp8")


def async_gain(sit: Situation) -> tuple[float, float]:
    """(what overlapping CPU scheduling with the device's steps gains, the device's busy
    share it is priced from): the gaps a busy share leaves, filled, at most 1.6x."""
    gpu_util = sit.observation.saturated.signals.gpu_util_pct
    busy = sit.estimate.busy_fraction if sit.estimate else 0.8
    busy = gpu_util / 100.0 if gpu_util is not None else busy
    return min(1.6, 1.0 / max(busy, 0.5)), busy


def async_sched(sit: Situation) -> Effect | str:
    if sit.engine.async_scheduling:
        return "async scheduling is already on"
    gain, busy = async_gain(sit)
    reason = (
        f"the GPU is busy {busy:.0%} of the time: overlapping CPU scheduling with GPU steps "
        "fills the gaps"
    )
    return Effect("to", gain, reason, target=True)


def eager(sit: Situation) -> Effect | str:
    if sit.binding == "cache":
        if sit.engine.enforce_eager:
            return "CUDA graphs are already off"
        ratio = kv_ratio(sit, enforce_eager=True)
        if isinstance(ratio, str):
            return f"turning CUDA graphs off: {ratio}"
        if ratio <= 1.0:
            return "the KV pool is pinned: graph memory freed would stay unused"
        reason = f"no CUDA graphs frees their memory for {ratio - 1:+.1%} KV tokens"
        return Effect("to", damped(ratio), reason + ", at slower decode", target=True)
    if not sit.engine.enforce_eager:
        return "CUDA graphs are already on"
    reason = "CUDA graphs remove per-layer launch overhead from decode steps"
    return Effect("to", 1.15, reason, target=False)


def prefix(sit: Situation) -> Effect | str:
    if sit.engine.enable_prefix_caching:
        return "prefix caching is already on"
    if not sit.shared_prefixes:
        return "the workload's prompts share no prefixes: nothing to reuse"
    if sit.binding == "scheduling" and not prefill_schedules(sit):
        return "it saves prefill work, and what binds is not prefills stalling decodes"
    workload = sit.observation.workload
    reuse = (
        prefix_reuse(
            workload,
            sit.memory.kv_tokens,
            block_tokens=sit.engine.block_size,
        )
        if workload is not None
        else None
    )
    if reuse is None or reuse.prompt_share <= 0.0:
        # A trace may share prefixes it does not describe: a modest guess, checked by the trial.
        return Effect(
            "to", 1.2, "prompts may share prefixes, computed once and reused", target=True
        )
    signals = sit.observation.saturated.signals
    tokens = signals.tokens_per_step_mean or 0.0
    decodes = (signals.generation_tokens_per_s or 0.0) / (signals.steps_per_s or 1.0)
    prefill_share = max(0.0, tokens - decodes) / tokens if tokens else 0.5
    ratio = reuse.prefill_ratio(prefill_share)
    reason = (
        f"{reuse.prompt_share:.0%} of prompt tokens are shared prefixes the cache "
        f"serves: step work {1 / ratio - 1:+.0%}"
    )
    if sit.binding == "cache":
        # Held once, the shared blocks stop crowding the pool: more sequences fit.
        ratio = max(ratio, damped(reuse.kv_ratio))
        reason += (
            f"; KV per sequence {reuse.context_before_tokens:.0f} -> "
            f"{reuse.context_after_tokens:.0f} tokens"
        )
    return Effect("to", min(MAX_RATIO, ratio), reason, target=True)


def prefill_schedules(sit: Situation) -> bool:
    """Whether the scheduling wall is one that less prefill work lowers: prefills stalling
    decodes, a token budget filled by them, or, on a CPU, the host's own work, which the
    model's math shares the cores with (the CPU build's multi-turn study read as CPU
    overhead in one run and as cache-bound in another; caching measured 2.47x there)."""
    kind = sit.diagnosis.scheduling_kind
    if kind in ("prefill_interference", "token_budget"):
        return True
    return kind == "cpu_overhead" and sit.observation.gpu.is_cpu


def stream_chunks(sit: Situation) -> Effect | str:
    if sit.diagnosis.scheduling_kind not in ("cpu_overhead", "frontend"):
        return "output processing is not what binds"
    current = sit.engine.stream_interval
    reason = f"{current} token(s) per chunk: fewer chunks mean less API-server work per token"
    return Effect("up", 1.05, reason)


def block(sit: Situation) -> Effect | str:
    """Smaller KV blocks, down to the smallest the device takes (``Situation.choices``)."""
    current = sit.engine.block_size
    sizes = [c for c in sit.choices if isinstance(c, int)]
    if not sizes or current <= min(sizes):
        return f"blocks are already {current} tokens, the smallest the search offers here"
    smallest = min(sizes)
    reason = f"{current}-token blocks waste up to {current - 1} tokens per sequence"
    return Effect("to", 1.03, f"{reason}; {smallest}-token blocks waste less", target=smallest)


RULES: dict[str, Rule] = {
    "kv_cache_dtype": kv_dtype,
    "async_scheduling": async_sched,
    "enforce_eager": eager,
    "enable_prefix_caching": prefix,
    "stream_interval": stream_chunks,
    "block_size": block,
}
