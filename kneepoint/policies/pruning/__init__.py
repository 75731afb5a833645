"""Which knobs can help what binds: each knob's modelled effect in the situation the diagnosis
names (batch, KV cache, quantization, tensor parallelism, prefix reuse), and the pruning that
keeps the candidates worth a trial, ordered by predicted gain (``prune``). Pure."""

from kneepoint.policies.pruning.prefix_savings import prefix_reuse
from kneepoint.policies.pruning.quant_effects import W4A16_RISK
from kneepoint.policies.pruning.sweep_findings import findings

__all__ = [
    "W4A16_RISK",
    "findings",
    "prefix_reuse",
]
