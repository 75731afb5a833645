"""Pure physics of a serving engine: engine defaults, the KV memory model (full, sliding-window
and hybrid attention), weight formats and quantisation, and the roofline.

Shared by the simulator (which runs it), the preflight (will a config start?), diagnosis (a
roofline estimate when GPU counters are missing) and the calibration. Imports only records.
"""

from kneepoint.physics.defaults import ResolvedEngine, UnmodeledSettingError, resolve_engine
from kneepoint.physics.kv_manager import KvLayout, kv_layout
from kneepoint.physics.memory import MemoryPlan, StartupRefusal, plan_memory
from kneepoint.physics.quantization import CHECKPOINT_METHODS, checkpoint_of
from kneepoint.physics.roofline import (
    BatchShape,
    Efficiency,
    Roofline,
    StepCost,
    cpu_seconds,
    window_pairs,
)
from kneepoint.physics.speculation import (
    SYNC_METHODS,
    Drafting,
    drafter_free,
    shares_through,
    step_tokens_then,
    throughput_ratio,
    tokens_per_draft,
)
from kneepoint.physics.startup import startup_seconds

__all__ = [
    "CHECKPOINT_METHODS",
    "SYNC_METHODS",
    "BatchShape",
    "Drafting",
    "Efficiency",
    "KvLayout",
    "MemoryPlan",
    "ResolvedEngine",
    "Roofline",
    "StartupRefusal",
    "StepCost",
    "UnmodeledSettingError",
    "checkpoint_of",
    "cpu_seconds",
    "drafter_free",
    "kv_layout",
    "plan_memory",
    "resolve_engine",
    "shares_through",
    "startup_seconds",
    "step_tokens_then",
    "throughput_ratio",
    "tokens_per_draft",
    "window_pairs",
]
