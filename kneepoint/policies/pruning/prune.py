"""Knob pruning: from a diagnosis, the knobs worth trying (in order of expected effect) and the
knobs ruled out, each with its reason.

A knob is ruled out when the study does not search it, the engine release does not know it,
the backend cannot model it, a condition it needs is missing (several GPUs, shared prefixes),
it acts only on constraints that do not bind, or its rule finds nothing it could change (it is
already where it would go, or the situation makes it useless: fp8 weights on a GPU without fp8
tensor cores against a compute wall). The rest become candidates, each with a direction, a
first value where it is a choice, a predicted capacity ratio and a reason; output-changing knobs
are flagged for a quality check. A choice whose needs the served checkpoint does not meet
(awq on a bf16 checkpoint) is left out of the candidate's domain, so no proposer can try it;
the quantization knob's reason then says what that checkpoint would do, latency included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import get_args

from pydantic import JsonValue

from kneepoint.policies.diagnosis import ConfigContext, estimate_step
from kneepoint.policies.pruning.batch_effects import BATCH_RULES, TAIL_RULES
from kneepoint.policies.pruning.ceiling import bound_growth
from kneepoint.policies.pruning.dp_effect import data_parallel
from kneepoint.policies.pruning.ep_effect import expert_parallel
from kneepoint.policies.pruning.frontend_effects import api_servers
from kneepoint.policies.pruning.knob_effects import (
    RULES,
    UNSET,
    Effect,
    Rule,
    Situation,
    aimed_at,
)
from kneepoint.policies.pruning.kv_effects import memory_bytes, memory_fraction
from kneepoint.policies.pruning.limits import Limits, has_shared_prefixes
from kneepoint.policies.pruning.long_shot import as_runner_up, long_shot
from kneepoint.policies.pruning.offload_effects import offloading
from kneepoint.policies.pruning.performance_mode import performance_mode
from kneepoint.policies.pruning.quant_effects import (
    checkpoint_advice,
    held_conditions,
    quantization,
)
from kneepoint.policies.pruning.spec_effects import speculation
from kneepoint.policies.pruning.tp_effect import tensor_parallel
from kneepoint.records import (
    BackendSpec,
    ChoiceDomain,
    Condition,
    Constraint,
    Diagnosis,
    Knob,
    KnobCandidate,
    KnobCatalogue,
    Pruning,
    RuledOut,
    SimBackend,
)

SIM = SimBackend()
# Below this confidence the runner-up's knobs are tried too, if it holds this share of time.
CLEAR_CUT = 0.6
RUNNER_UP_SHARE = 0.2
PRICING_RULES: dict[str, Rule] = {
    **RULES,
    **BATCH_RULES,
    "quantization": quantization,
    "tensor_parallel_size": tensor_parallel,
    "data_parallel_size": data_parallel,
    "enable_expert_parallel": expert_parallel,
    "gpu_memory_utilization": memory_fraction,
    "kv_cache_memory_bytes": memory_bytes,
    "speculative_config": speculation,
    "api_server_count": api_servers,
    "kv_offloading_size": offloading,
    "performance_mode": performance_mode,
}
"""Each knob's pricing rule by name: an ``Effect`` (a direction, a ratio, a reason) or why
it cannot help, asked in the situation ``asked`` builds for the knob. The contract every rule
keeps is held by tests/test_pricing_rules.py."""


def prune(
    diagnosis: Diagnosis,
    context: ConfigContext,
    catalogue: KnobCatalogue,
    *,
    allowed: Sequence[str] = (),
    vllm_version: str | None = None,
    backend: BackendSpec = SIM,
    gpus: int = 1,
) -> Pruning:
    """Candidates and ruled-out knobs for the constraint ``diagnosis`` names in the
    configuration ``context`` describes."""
    observation = context.observation
    targets = _targets(diagnosis)
    situation = situation_of(diagnosis, context)
    workload = observation.workload
    shared = workload is None or has_shared_prefixes(workload)
    limits = Limits(
        allowed,
        vllm_version,
        backend,
        gpus,
        shared,
        observation.gpu.offloads_kv,
        observation.model.is_moe,
    )
    held = held_conditions(observation)
    candidates: list[KnobCandidate] = []
    ruled: list[RuledOut] = []
    shots: list[KnobCandidate] = []
    notes: dict[str, str] = {}
    for knob in catalogue.knobs:
        reason = limits.reason_out(knob)
        if reason is None and not targets:
            reason = f"nothing to prune toward: the diagnosis is {diagnosis.binding}"
        if reason is None and situation is None:
            reason = "the incumbent configuration is outside what the physics models"
        if reason is not None:
            ruled.append(RuledOut(knob=knob.name, reason=reason))
            continue
        assert situation is not None
        narrowed, left_out, sit = asked(knob, situation, held, gpus)
        found = _best_effect(narrowed, targets, sit)
        if knob.name == "quantization" and left_out and "unquantized_checkpoint" in held:
            notes[knob.name] = checkpoint_advice(sit, left_out)
            found = _with_note(found, f"{', '.join(left_out)}: see the knobs' notes")
        if isinstance(found, str):
            ruled.append(RuledOut(knob=knob.name, reason=found))
            # a dense model's replicas are 1.00x per GPU by construction, not by a reading
            worth_a_shot = knob.name != "data_parallel_size" or observation.model.is_moe
            if worth_a_shot and (not narrowed.domain.choices_or_empty or len(sit.choices) >= 2):
                rule = PRICING_RULES.get(knob.name)
                shots.append(long_shot(narrowed, targets[0], found, rule, sit))
        else:
            candidates.append(found)
    candidates.sort(key=lambda c: -c.predicted_ratio)
    return Pruning(
        candidates=tuple(candidates), ruled_out=tuple(ruled), long_shots=tuple(shots), notes=notes
    )


def asked(
    knob: Knob, situation: Situation, held: frozenset[Condition], gpus: int
) -> tuple[Knob, tuple[str, ...], Situation]:
    """The knob as it may be searched here (only the choices the held conditions and the
    study's GPUs allow), the choices left out, and the situation its rule is asked in (those
    choices, its domain's floor)."""
    narrowed, left_out = _narrowed(knob, held, getattr(situation.engine, knob.name, None))
    choices = knob.choices_under(held)
    if knob.name == "tensor_parallel_size":
        heads = situation.observation.model.num_attention_heads
        narrowed, choices = _parallel_sizes(knob, gpus, heads)
    if knob.name == "data_parallel_size":
        width = situation.engine.tensor_parallel_size
        choices = tuple(c for c in choices if isinstance(c, int) and c * width <= gpus)
    domain = narrowed.domain
    floor = domain.low if domain.numeric else None
    return narrowed, left_out, replace(situation, choices=choices, floor=floor)


def _parallel_sizes(knob: Knob, gpus: int, heads: int) -> tuple[Knob, tuple[JsonValue, ...]]:
    """Tensor-parallel sizes one server of the study can take: at most its GPUs, and dividing
    the model's attention heads (vLLM refuses the rest)."""
    choices = knob.domain.choices_or_empty
    sizes = tuple(c for c in choices if isinstance(c, int) and c <= gpus and heads % c == 0)
    if len(sizes) < 2:
        return knob, sizes
    return knob.model_copy(update={"domain": ChoiceDomain(choices=sizes)}), sizes


def _with_note(found: KnobCandidate | str, note: str) -> KnobCandidate | str:
    if isinstance(found, str):
        return f"{found}. {note}"
    return found.model_copy(update={"reason": f"{found.reason}. {note}"})


def _narrowed(
    knob: Knob, held: frozenset[Condition], current: JsonValue
) -> tuple[Knob, tuple[str, ...]]:
    """The knob with only the choices the held conditions allow (a candidate then searches no
    other), and the choices left out. One left: that choice and the incumbent's ``current``
    value (vLLM's CPU build: 32- or its default 128-token blocks, never the 16 it refuses).
    None left, or one and no other value to search: the knob as it is (its rule, told the
    choices left, says why)."""
    allowed = knob.choices_under(held)
    left_out = tuple(str(c) for c in knob.domain.choices_or_empty if c not in allowed)
    numbers = [v for v in (*allowed, current) if isinstance(v, int | float)]
    if len(allowed) == 1 and current not in allowed and len(numbers) == 2:
        allowed = tuple(sorted(numbers))
    if not left_out or len(allowed) < 2:
        return knob, left_out
    needs = {c: n for c, n in knob.value_needs.items() if c in allowed}
    domain = ChoiceDomain(choices=allowed)
    return knob.model_copy(update={"domain": domain, "value_needs": needs}), left_out


def _targets(diagnosis: Diagnosis) -> tuple[Constraint, ...]:
    """Constraints to aim at: the binding one, and the runner-up where the verdict is not
    clear-cut (it may bind as soon as the first wall moves); when inconclusive, the two best
    scored."""
    scored = sorted(
        (c for c, v in diagnosis.scores.items() if v > 0), key=lambda c: -diagnosis.scores[c]
    )
    binding, runner = diagnosis.constraint, diagnosis.runner_up
    if binding is not None:
        close = diagnosis.confidence < CLEAR_CUT and runner is not None
        if close and runner is not None and diagnosis.scores.get(runner, 0.0) >= RUNNER_UP_SHARE:
            return (binding, runner)
        return (binding,)
    if diagnosis.binding != "inconclusive":
        return ()
    # No evidence at all (a server whose /metrics cannot be read, no GPU counters): nothing
    # can be ruled out by what binds, so every constraint is a target and each knob's rule
    # prices it as if its own constraint bound.
    return tuple(scored[:2]) if scored else get_args(Constraint)


def situation_of(diagnosis: Diagnosis, context: ConfigContext) -> Situation | None:
    """What every rule reads for ``context`` under ``diagnosis``; None where the physics
    cannot resolve the incumbent (no engine or memory plan)."""
    observation, engine, memory = context.observation, context.engine, context.memory
    if engine is None or memory is None:
        return None
    estimate = estimate_step(
        observation.saturated.signals,
        observation.gpu,
        observation.model,
        engine,
        observation.workload,
        efficiency=observation.efficiency,
    )
    shared = observation.workload is not None and has_shared_prefixes(observation.workload)
    return Situation(diagnosis, observation, engine, memory, estimate, shared)


def _best_effect(
    knob: Knob, targets: tuple[Constraint, ...], situation: Situation
) -> KnobCandidate | str:
    aimed = [t for t in targets if t in knob.acts_on]
    rule = PRICING_RULES.get(knob.name)
    if not aimed:
        tail = TAIL_RULES.get(knob.name)
        effect = tail(situation) if tail is not None else None
        if effect is not None and _at_edge(knob, effect, situation) is None:
            return _candidate(knob, effect, situation, "scheduling")
        acts = ", ".join(knob.acts_on)
        priced = as_runner_up(knob, rule, situation)
        return f"acts on {acts}; {' or '.join(targets)} binds{priced}"
    if rule is None:
        return "no rule says how it moves this constraint"
    reasons: list[str] = []
    for target in aimed:
        sit = situation if target == situation.diagnosis.constraint else aimed_at(situation, target)
        found = rule(sit)
        if isinstance(found, Effect) and (edge := _at_edge(knob, found, sit)) is not None:
            found = edge
        if isinstance(found, Effect):
            found = bound_growth(knob.name, found, sit.observation, target)
        if isinstance(found, Effect):
            return _candidate(knob, found, sit, target)
        reasons.append(found)
    return "; ".join(dict.fromkeys(reasons))  # two targets often give one reason


def _candidate(
    knob: Knob, effect: Effect, situation: Situation, relieves: Constraint
) -> KnobCandidate:
    return KnobCandidate(
        knob=knob,
        direction=effect.direction,
        target=_target(knob, effect, situation),
        relieves=relieves,
        predicted_ratio=round(effect.ratio, 3),
        reason=effect.reason,
        needs_quality_check=knob.changes_outputs,
    )


def _at_edge(knob: Knob, effect: Effect, situation: Situation) -> str | None:
    """Why an up or down move cannot be made: the incumbent is at its domain's bound (a move
    past the knob's ceiling is never proposed, whatever the rule would gain)."""
    domain = knob.domain
    if effect.direction not in ("up", "down") or not domain.numeric:
        return None
    value = getattr(situation.engine, knob.name, None)
    if value is None:
        value = getattr(situation.observation.engine, knob.name, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if effect.direction == "up" and value >= domain.high:
        return f"already at its ceiling ({value:g}, the top of its domain): {effect.reason}"
    # Below the floor is a sentinel, not a value (long_prefill_token_threshold 0: no cap).
    if effect.direction == "down" and value == domain.low:
        return f"already at its floor ({value:g}, the bottom of its domain): {effect.reason}"
    return None


def _target(knob: Knob, effect: Effect, situation: Situation) -> JsonValue:
    """The value a ``to`` move tries: the rule's, else the first choice unlike the incumbent's."""
    if effect.target is not UNSET:
        return effect.target  # type: ignore[return-value]
    if effect.direction != "to":
        return None
    current = getattr(situation.observation.engine, knob.name)
    choices = getattr(knob.domain, "choices", ())
    return next((c for c in choices if c is not None and c != current), None)
