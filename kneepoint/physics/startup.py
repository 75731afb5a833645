"""How long a configuration takes to start: what a restart costs in device time.

vLLM's start-up loads the weights (bounded by disk and PCIe, a few GB/s per GPU), profiles
the activation peak, allocates the KV cache and, unless enforce_eager, captures CUDA graphs
for every capture size (tens of seconds). Public start-up logs of 7-14B models on one H100
show one to two minutes; the model below lands there and grows with the weights.
"""

from __future__ import annotations

from kneepoint.physics.defaults import ResolvedEngine
from kneepoint.physics.memory import weight_bytes_per_gpu
from kneepoint.records import ModelSpec

LOAD_BYTES_PER_S = 2.5e9
"""Weights read from a local NVMe cache into GPU memory, per GPU."""
INIT_S = 25.0
"""Process start, imports, engine and tokenizer set-up, the profiling run."""
GRAPH_CAPTURE_S = 30.0
"""torch.compile warm-up and CUDA-graph capture over the default capture sizes."""


def startup_seconds(model: ModelSpec, engine: ResolvedEngine) -> float:
    """Wall seconds from launch to a healthy server."""
    load = weight_bytes_per_gpu(model, engine) / LOAD_BYTES_PER_S
    return INIT_S + load + (0.0 if engine.enforce_eager else GRAPH_CAPTURE_S)
