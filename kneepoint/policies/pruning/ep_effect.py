"""What switching expert parallelism should do: the rule pruning asks for a mixture-of-experts
model served on several GPUs.

Either way vLLM spreads the routed experts over every GPU of the server
(``kneepoint.physics.experts``): sliced, every GPU streams the same share of the experts a
step touches; whole (``--enable-expert-parallel``), each streams the touched ones among its
own and the step waits for the busiest. The rule prices the saturated step both ways with the
roofline at the batch the server ran. With tokens routed uniformly the busiest GPU never
streams less than the even slice, so the rule finds no gain (NVIDIA NeMo-RL measured none on
DeepSeek-V3 with vLLM's default all-to-all, NVIDIA-NeMo/RL PR #997, Aug 2025); what EP can buy
beyond that (fewer, larger expert GEMMs; DeepEP's kernels across nodes) is not modeled.
"""

from __future__ import annotations

from kneepoint.physics import Roofline, kv_layout, resolve_engine
from kneepoint.policies.diagnosis import observed_shape
from kneepoint.policies.pruning.knob_effects import NOTHING_GAINED, Effect, Situation


def expert_parallel(sit: Situation) -> Effect | str:
    obs = sit.observation
    if not obs.model.is_moe:
        return f"{obs.model.name} is dense: it has no experts to place"
    gpus = sit.engine.tensor_parallel_size * sit.engine.data_parallel_size
    if gpus == 1:
        return "the server has one GPU: it holds every expert whole already"
    found = observed_shape(obs.saturated.signals, obs.workload, kv_layout(obs.model, sit.engine))
    if found is None:
        return "the metrics describe no step to price it at"
    shape, _ = found
    now = Roofline(obs.gpu, obs.model, sit.engine, obs.efficiency).step(shape).wall_s
    turned = not sit.engine.expert_parallel
    other_config = obs.engine.replace(enable_expert_parallel=turned)
    other = resolve_engine(other_config, obs.gpu, obs.model)
    then = Roofline(obs.gpu, obs.model, other, obs.efficiency).step(shape).wall_s
    ratio = now / then
    how = "whole experts" if turned else "a slice of every expert"
    reason = (
        f"{how} on each of {gpus} GPUs: the step at today's batch "
        f"({shape.new_tokens} tokens) runs {ratio:.2f}x as fast"
    )
    if ratio < NOTHING_GAINED:
        return reason + ": no gain (the busiest GPU's experts set the step)"
    return Effect("to", ratio, reason, target=turned)
