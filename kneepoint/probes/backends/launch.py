"""A server process launched per configuration (real ``vllm serve``, or ``kneepoint sim
serve``): it waits for health, checks that the server answering is the one it started with this
config, reads the KV capacity from the startup log, and stops the whole process group on the
way out. Start failures raise ``ServerFailedError`` with the failure classified from the
server's own output."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import structlog

from kneepoint.probes.backends.base import Endpoint, server_version
from kneepoint.probes.backends.measure import Instruments
from kneepoint.probes.server import (
    SERVER_KEY_VARIABLE,
    ServerFailedError,
    ServerProcess,
    address_in_use,
    bound_cores,
    check_identity,
    free_port,
    kv_capacity_tokens,
)
from kneepoint.records import EngineConfig
from kneepoint.sim import is_loopback

log = structlog.get_logger(__name__)
_WARNED_HOSTS: set[str] = set()

ArgvFor = Callable[[EngineConfig, str, int, str], list[str]]
GpusFor = Callable[[EngineConfig], tuple[int, ...]]
"""The local GPUs (NVML indices) a configuration's server holds, for NVML to sample."""
"""(config, host, port, served model name) -> the launch argv."""


class LaunchBackend:
    """One server process per configuration."""

    def __init__(
        self,
        argv_for: ArgvFor,
        *,
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 900.0,
        hang_after_s: float = 300.0,
        sim_telemetry: bool = False,
        nvml_for: GpusFor | None = None,
        api_key: str | None = None,
        nice: int = 0,
    ) -> None:
        """``nice``: how much lower the server's CPU priority is than the agent's.
        ``api_key``: the server is given it as VLLM_API_KEY in ``env`` (the caller's job,
        ``kneepoint.probes.server.credentials.server_env``) and called with it; without one, a
        VLLM_API_KEY in the agent's own environment is kept from the server, which would
        otherwise refuse every request."""
        self.argv_for, self.env, self.api_key = argv_for, dict(env or {}), api_key
        self.host, self.port = host, port
        self.startup_timeout_s, self.hang_after_s = startup_timeout_s, hang_after_s
        self.sim_telemetry, self.nvml_for, self.nice = sim_telemetry, nvml_for, nice
        if not is_loopback(host) and host not in _WARNED_HOSTS:
            _WARNED_HOSTS.add(host)  # once per run, not once per launched trial
            log.warning(
                "server.exposed",
                host=host,
                why="the study's backend.host is not a loopback address: every "
                "launched server is reachable from the network",
            )

    @contextmanager
    def serve(self, config: EngineConfig, trial_dir: Path) -> Iterator[Endpoint]:
        # A nonce in the served name: a stale server on the port cannot pass for this one.
        served = f"{Path(config.model).name}-kp{secrets.token_hex(4)}"
        for attempt in range(2):
            port = self.port or free_port(self.host)
            url = f"http://{self.host}:{port}"
            argv = self.argv_for(config, self.host, port, served)
            log_path = trial_dir / ("server.log" if attempt == 0 else f"server.{attempt}.log")
            unset = () if self.api_key else (SERVER_KEY_VARIABLE,)
            with ServerProcess(argv, log_path, self.env, unset, nice=self.nice) as proc:
                try:
                    proc.wait_healthy(url, self.startup_timeout_s, hang_after_s=self.hang_after_s)
                except ServerFailedError:
                    if attempt == 0 and self.port is None and address_in_use(proc.log_text()):
                        continue  # lost a race for the free port: once more on another
                    raise
                notes = check_identity(url, served, config, self.api_key)
                yield Endpoint(
                    url,
                    served,
                    Instruments(
                        sim_telemetry=self.sim_telemetry,
                        nvml_indices=self.nvml_for(config) if self.nvml_for else (),
                        engine_pid=proc.pid,
                        engine_cores=bound_cores(proc.log_text()),
                    ),
                    proc,
                    kv_capacity_tokens(proc.log_text()),
                    notes,
                    server_version(url, self.api_key),
                    api_key=self.api_key,
                )
                return
