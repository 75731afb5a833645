"""Real ``vllm serve`` launched per configuration: the study's command, environment (its API
key and the variables it names), host, port, start-up limit and GPU."""

from __future__ import annotations

from kneepoint.probes.backends.base import Backend, Opening
from kneepoint.probes.backends.launch import ArgvFor, LaunchBackend
from kneepoint.probes.server import api_key, server_env
from kneepoint.records import AttachBackend, EngineConfig, SimBackend, VllmBackend


def vllm_server(o: Opening) -> Backend:
    """The launcher of the study's ``vllm serve``."""
    spec = o.study.backend
    assert not isinstance(spec, SimBackend | AttachBackend)
    key = api_key(o.study)
    # NVML reads the server's first GPU (its tensor-parallel peers run in step); CPU hosts, AMD:
    # none
    first = spec.gpu_ids[0] if spec.gpu_ids else "0"
    nvml = int(first) if o.study.gpu.has_nvml and first.isdigit() else None
    return LaunchBackend(
        vllm_argv(spec),
        env=server_env(o.study, spec, key),
        host=spec.host,
        port=spec.port,
        startup_timeout_s=spec.startup_timeout_s,
        nvml_index=nvml,
        api_key=key,
        nice=o.study.measurement.server_nice,
    )


def vllm_argv(spec: VllmBackend) -> ArgvFor:
    def argv(config: EngineConfig, host: str, port: int, served: str) -> list[str]:
        base = config.serve_argv(spec.command, spec.model_as)
        return [*base, "--host", host, "--port", str(port), "--served-model-name", served]

    return argv
