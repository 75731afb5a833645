"""Engine backends behind one interface: ``serve(config, trial_dir)`` yields an ``Endpoint``.

- ``LaunchBackend``: starts a server process per configuration (real ``vllm serve``, or
  ``kneepoint sim serve``), waits for health, checks that the server answering is the one it
  started with this config, reads the KV capacity from the startup log, and stops the whole
  process group on the way out. Start failures raise ``ServerFailedError`` with the failure
  classified from the server's own output.
- ``RunningServer``: a server someone else runs; measure and diagnose only.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import structlog
from packaging.version import InvalidVersion, Version

from kneepoint.probes.credentials import SERVER_KEY_VARIABLE
from kneepoint.probes.identity import attached_card, check_identity, model_cards
from kneepoint.probes.measure import Instruments
from kneepoint.probes.openai_wire import bearer
from kneepoint.probes.process import ServerProcess, free_port
from kneepoint.probes.server_failure import (
    Failure,
    ServerFailedError,
    address_in_use,
    bound_cores,
    kv_capacity_tokens,
)
from kneepoint.records.backend_spec import VllmBackend
from kneepoint.records.engine import EngineConfig
from kneepoint.sim.access import is_loopback

log = structlog.get_logger(__name__)
_WARNED_HOSTS: set[str] = set()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server ready for load: where, under which model name, and what measures it."""

    url: str
    served_model: str
    instruments: Instruments = field(default_factory=Instruments)
    process: ServerProcess | None = None
    kv_capacity_tokens: int | None = None
    notes: tuple[str, ...] = field(default=())
    version: str | None = None
    """The engine release the server reports at ``/version`` (None: it does not say)."""
    api_key: str | None = field(default=None, repr=False)
    """What every client sends as ``Authorization: Bearer`` (None: no key)."""

    def failure(self) -> Failure | None:
        """Why the server is gone, if its process has exited (None: still up, or not ours)."""
        if self.process is None or self.process.alive():
            return None
        return self.process.failure()


class Backend(Protocol):
    def serve(self, config: EngineConfig, trial_dir: Path) -> AbstractContextManager[Endpoint]:
        """The server for ``config``, up and checked, for the length of the ``with``."""
        ...


ArgvFor = Callable[[EngineConfig, str, int, str], list[str]]
"""(config, host, port, served model name) -> the launch argv."""


def vllm_argv(spec: VllmBackend) -> ArgvFor:
    def argv(config: EngineConfig, host: str, port: int, served: str) -> list[str]:
        base = config.serve_argv(spec.command, spec.model_as)
        return [*base, "--host", host, "--port", str(port), "--served-model-name", served]

    return argv


def sim_argv(
    gpu: str, model: str, calibration: Path | None = None, faults: Sequence[str] = ()
) -> ArgvFor:
    """``kneepoint sim serve`` with the same flags vLLM would get (and the study's
    calibration, when it names one, and the ``--fault-*`` flags it is to act out)."""
    fitted = ["--calibration", str(calibration)] if calibration is not None else []
    fitted += faults

    def argv(config: EngineConfig, host: str, port: int, served: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "kneepoint.cli.main",
            "sim",
            "serve",
            "--gpu",
            gpu,
            "--model",
            model,
            *fitted,
            *config.flag_args(),
            "--host",
            host,
            "--port",
            str(port),
            "--served-model-name",
            served,
        ]

    return argv


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
        nvml_index: int | None = None,
        api_key: str | None = None,
        nice: int = 0,
    ) -> None:
        """``nice``: how much lower the server's CPU priority is than the agent's.
        ``api_key``: the server is given it as VLLM_API_KEY in ``env`` (the caller's job,
        ``kneepoint.probes.credentials.server_env``) and called with it; without one, a
        VLLM_API_KEY in the agent's own environment is kept from the server, which would
        otherwise refuse every request."""
        self.argv_for, self.env, self.api_key = argv_for, dict(env or {}), api_key
        self.host, self.port = host, port
        self.startup_timeout_s, self.hang_after_s = startup_timeout_s, hang_after_s
        self.sim_telemetry, self.nvml_index, self.nice = sim_telemetry, nvml_index, nice
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
                        nvml_index=self.nvml_index,
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


def server_version(url: str, api_key: str | None = None) -> str | None:
    """The release a vLLM server reports at ``/version``; None where it has no such route or
    answers something that is not a version (the knobs a release knows are read from it)."""
    try:
        with httpx.Client(timeout=5.0, headers=bearer(api_key)) as client:
            response = client.get(f"{url}/version")
        body = response.json() if response.status_code == 200 else None
        version = str(body.get("version")) if isinstance(body, dict) else None
        if version:
            Version(version)  # raises InvalidVersion: "0.0-hostile" is no release
        return version
    except (httpx.HTTPError, ValueError, InvalidVersion) as exc:
        log.warning("server.version_unread", url=url, error=str(exc))
        return None


class RunningServer:
    """A running server: every configuration is whatever it runs."""

    def __init__(
        self, url: str, *, nvml_index: int | None = None, api_key: str | None = None
    ) -> None:
        self.url, self.nvml_index, self.api_key = url.rstrip("/"), nvml_index, api_key

    @contextmanager
    def serve(self, config: EngineConfig, trial_dir: Path) -> Iterator[Endpoint]:
        with httpx.Client(timeout=10.0, headers=bearer(self.api_key)) as client:
            try:
                response = client.get(f"{self.url}/v1/models")
                models = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                failure = Failure("unreachable", f"{self.url} does not answer: {exc}", None, ())
                raise ServerFailedError(failure) from exc
        if response.status_code == 401:
            what = (
                f"{self.url} refuses the request (HTTP 401): it wants an API key; name the "
                "variable holding it in backend.api_key_env"
            )
            raise ServerFailedError(Failure("bad_argument", what, None, ()))
        try:
            cards = model_cards(models)
        except ValueError as exc:
            what = f"{self.url}/v1/models does not answer as vLLM does: {exc}"
            raise ServerFailedError(Failure("crashed", what, None, ())) from exc
        card = attached_card(self.url, cards, config)
        yield Endpoint(
            self.url,
            card.id,
            Instruments(nvml_index=self.nvml_index),
            version=server_version(self.url, self.api_key),
            api_key=self.api_key,
        )
