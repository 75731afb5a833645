"""vLLM's intent flag (``--performance-mode``) priced as the moves it makes. Throughput mode
doubles the batch limits the incumbent leaves to their defaults, so it is worth what doubling
those is worth here: the running cap's rule where the cap binds, the step budget's where steps
run full. Interactivity only resizes CUDA graphs at batches of 32 or fewer, padding the
roofline does not price, so it is left to the long shots."""

from __future__ import annotations

from kneepoint.policies.pruning.batch_effects import seqs, token_budget
from kneepoint.policies.pruning.knob_effects import Effect, Rule, Situation

DOUBLED: dict[str, Rule] = {"max_num_seqs": seqs, "max_num_batched_tokens": token_budget}
"""The limits throughput mode doubles where they are unset, each with the rule that prices
doubling it (vLLM's ``EngineArgs``, 0.17 on)."""


def performance_mode(sit: Situation) -> Effect | str:
    """Throughput mode, priced as the best of the doublings it makes; or why not."""
    config = sit.observation.engine
    if config.performance_mode == "throughput":
        return "already in throughput mode"
    unset = [name for name in DOUBLED if getattr(config, name) is None]
    if not unset:
        return (
            "max_num_seqs and max_num_batched_tokens are both set: throughput mode doubles "
            "only their defaults"
        )
    priced: list[tuple[str, Effect]] = []
    why: list[str] = []
    for name in unset:
        found = DOUBLED[name](sit)
        if isinstance(found, Effect) and found.direction == "up":
            priced.append((name, found))
        else:
            why.append(f"{name}: {found if isinstance(found, str) else 'it would lower it'}")
    doubles = " and ".join(unset)
    if not priced:
        none = "neither pays" if len(unset) > 1 else "that does not pay"
        return f"throughput mode doubles the defaulted {doubles}; {none}: {'; '.join(why)}"
    name, best = max(priced, key=lambda p: p[1].ratio)
    reason = f"throughput mode doubles the defaulted {doubles}; {name}: {best.reason}"
    return Effect("to", best.ratio, reason, target="throughput")
