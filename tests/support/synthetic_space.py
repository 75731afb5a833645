"""A search space over the shipped knob catalogue and a pure synthetic objective with a known
optimum, shared by the proposer tests.

The objective is an SLO capacity (req/s) that peaks at max_num_seqs 512, max_num_batched_tokens
4096 and gpu_memory_utilization 0.94, with async scheduling and speculative decoding on. Above
0.95 the server does not start (out of memory at load) and above 900 sequences it crashes under
load, so the walls are where a real server has them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import JsonValue

from kneepoint.config.catalog import knob_catalogue
from kneepoint.policies.search.proposer import Proposer
from kneepoint.records.engine import EngineConfig
from kneepoint.records.proposal import KnobCandidate, Outcome, Proposal, SearchSpace

SPEC: dict[str, JsonValue] = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 4,
}
CURRENT: dict[str, JsonValue] = {
    "max_num_seqs": 256,
    "max_num_batched_tokens": 2048,
    "gpu_memory_utilization": 0.9,
    "async_scheduling": False,
    "speculative_config": None,
}
OPTIMUM: dict[str, JsonValue] = {
    "max_num_seqs": 512,
    "max_num_batched_tokens": 4096,
    "gpu_memory_utilization": 0.94,
    "async_scheduling": True,
    "speculative_config": SPEC,
}
PEAK_RPS = 20.0
Objective = Callable[[EngineConfig], Outcome]


def candidate(name: str, direction: str, ratio: float, target: JsonValue = None) -> KnobCandidate:
    knob = knob_catalogue().get(name)
    assert knob is not None, name
    return KnobCandidate(
        knob=knob,
        direction=direction,  # type: ignore[arg-type]
        target=target,
        relieves=knob.acts_on[0],
        predicted_ratio=ratio,
        reason=f"the diagnosis points at {name}",
    )


CANDIDATES = (
    candidate("max_num_seqs", "up", 1.2),
    candidate("max_num_batched_tokens", "up", 1.1),
    candidate("gpu_memory_utilization", "up", 1.05),
    candidate("async_scheduling", "to", 1.1, True),
    candidate("speculative_config", "to", 1.05, SPEC),
)


def effective(config: EngineConfig, name: str, current: dict[str, JsonValue] = CURRENT) -> Any:
    value = getattr(config, name)
    return current.get(name) if value is None else value


def capacity(config: EngineConfig) -> Outcome:
    """The synthetic server's measured SLO capacity (or how it failed)."""
    seqs = effective(config, "max_num_seqs")
    tokens = effective(config, "max_num_batched_tokens")
    memory = effective(config, "gpu_memory_utilization")
    if memory > 0.95:
        return Outcome(status="startup_failed", detail="CUDA out of memory while loading")
    if seqs > 900:
        return Outcome(status="crashed", detail="out of memory under load")
    rps = PEAK_RPS
    rps *= 1 - 0.1 * math.log2(seqs / 512) ** 2
    rps *= 1 - 0.1 * math.log2(tokens / 4096) ** 2
    rps *= 1 - 30 * (memory - 0.94) ** 2
    rps *= 1.0 if effective(config, "async_scheduling") else 0.9
    rps *= 1.0 if effective(config, "speculative_config") else 0.95
    return Outcome(status="ok", objective=rps, feasible=True)


def make_space(incumbent: EngineConfig | None = None, **update: Any) -> SearchSpace:
    incumbent = incumbent or EngineConfig(model="synthetic/model")
    objective = capacity(incumbent).objective
    fields: dict[str, Any] = {
        "incumbent": incumbent,
        "incumbent_objective": objective,
        "current_values": CURRENT,
        "candidates": CANDIDATES,
    }
    return SearchSpace(**{**fields, **update})


def drive(
    proposer: Proposer, rounds: int, objective: Objective = capacity
) -> list[tuple[Proposal, Outcome]]:
    """Ask and tell until the proposer has nothing left or ``rounds`` trials ran."""
    history: list[tuple[Proposal, Outcome]] = []
    for _ in range(rounds):
        proposal = proposer.ask()
        if proposal is None:
            break
        outcome = objective(proposal.config)
        proposer.tell(proposal, outcome)
        history.append((proposal, outcome))
    return history
