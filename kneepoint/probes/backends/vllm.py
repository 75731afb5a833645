"""Real ``vllm serve`` launched per configuration: the study's command, environment (its API
key and the variables it names), host, port, start-up limit and GPU."""

from __future__ import annotations

from kneepoint.probes.backends.base import Backend, Opening
from kneepoint.probes.backends.launch import ArgvFor, GpusFor, LaunchBackend
from kneepoint.probes.server import api_key, server_env
from kneepoint.records import AttachBackend, EngineConfig, SimBackend, VllmBackend


def vllm_server(o: Opening) -> Backend:
    """The launcher of the study's ``vllm serve``."""
    spec = o.study.backend
    assert not isinstance(spec, SimBackend | AttachBackend)
    key = api_key(o.study)
    return LaunchBackend(
        vllm_argv(spec),
        env=server_env(o.study, spec, key),
        host=spec.host,
        port=spec.port,
        startup_timeout_s=spec.startup_timeout_s,
        nvml_for=_held_gpus(spec) if o.study.gpu.has_nvml else None,  # CPU hosts, AMD: none
        api_key=key,
        nice=o.study.measurement.server_nice,
    )


def _held_gpus(spec: VllmBackend) -> GpusFor:
    """The GPUs a configuration's server holds: those the step was given (Ray's, or
    ``--gpus``), else the machine's first ``gpu_count``, as CUDA hands them to vLLM."""

    def held(config: EngineConfig) -> tuple[int, ...]:
        if spec.gpu_ids:
            return tuple(int(i) for i in spec.gpu_ids if i.isdigit())
        return tuple(range(config.gpu_count))

    return held


def vllm_argv(spec: VllmBackend) -> ArgvFor:
    def argv(config: EngineConfig, host: str, port: int, served: str) -> list[str]:
        base = config.serve_argv(spec.command, spec.model_as)
        return [*base, "--host", host, "--port", str(port), "--served-model-name", served]

    return argv
