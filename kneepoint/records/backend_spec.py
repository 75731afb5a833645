"""Where a study's servers come from (``backend`` in a study): the embedded simulator, real
``vllm serve`` launched per configuration, or a running server to attach to. Secrets never sit
in a study: an API key travels in an environment variable the study names.

Each kind carries what the rest of kneepoint needs to know of it (``BackendSpec``): whether its
servers give real model outputs, whether kneepoint sets their knobs, what it would silently
ignore, its clock, the command that serves a configuration on it. Nothing else asks which kind a
study has; one contract suite (tests/test_backend_contract.py) holds every kind to them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from kneepoint.records.base import InputRecord
from kneepoint.records.engine import EngineConfig
from kneepoint.records.faults import Faults
from kneepoint.records.limits import MAX_WAIT_SECONDS
from kneepoint.records.secret_env import ENV_NAME, looks_secret, referenced

SIM_UNMODELED: Mapping[str, str] = {}
"""Knobs the simulator would silently ignore: a change to one proves nothing there. (n-gram
speculation is modelled from each traffic class's ``speculation``; another drafter is refused
at start, as a setting the physics has no model for.)"""
SIM_HTTP_UNMODELED: Mapping[str, str] = {
    "speculative_config": (
        "`kneepoint sim serve` knows no traffic class's drafts (the virtual clock does: "
        "workload classes' speculation)"
    ),
    "api_server_count": "`kneepoint sim serve` runs one API server in front of its engine",
    "kv_offloading_size": "`kneepoint sim serve` does not offload KV to host memory",
    "data_parallel_size": (
        "`kneepoint sim serve` runs one engine (the virtual clock runs replicas behind "
        "vLLM's balancer)"
    ),
}
MODULE_LAUNCHER = "vllm.entrypoints.openai.api_server"
"""The API-server module, which serves from one process whatever --api-server-count says
(vLLM 0.32: its ``main`` runs ``run_server`` alone; ``vllm serve`` starts the others)."""


class BackendSpec(InputRecord):
    """What every kind of backend answers (the defaults: a real vLLM server we launch)."""

    @property
    def simulated(self) -> bool:
        """Its servers are the simulator: its physics holds exactly, and a setting it does not
        model refuses to start rather than being ignored."""
        return False

    @property
    def virtual_clock(self) -> bool:
        """It runs in-process on a virtual clock: no server, no wall time."""
        return False

    @property
    def real_outputs(self) -> bool:
        """Greedy answers from its servers say something about a change's quality."""
        return not self.simulated

    @property
    def owns_knobs(self) -> bool:
        """kneepoint starts its servers, so sets their knobs."""
        return True

    @property
    def unmodeled_knobs(self) -> Mapping[str, str]:
        """Knobs its servers would silently ignore, each with why."""
        return {}

    @property
    def launch_command(self) -> tuple[str, ...] | None:
        """The command that launches real vLLM, before the model (None: it launches none)."""
        return None

    @property
    def stated_vllm_version(self) -> str | None:
        """The vLLM release the study says its servers run (None: not stated)."""
        return None

    @property
    def api_key_variable(self) -> str | None:
        """The environment variable holding its servers' API key (None: no key)."""
        return None

    @property
    def launch_env(self) -> Mapping[str, str]:
        """Variables its launched servers get, ``${NAME}`` not yet read."""
        return {}

    @property
    def checks_memory(self) -> bool:
        """Configurations the memory model says cannot start are refused before a launch."""
        return True

    @property
    def injected_faults(self) -> Faults | None:
        """Failures injected on purpose (None: a healthy server)."""
        return None

    def serve_argv(self, config: EngineConfig) -> list[str]:
        """The command that serves ``config`` (``vllm serve`` where it launches none)."""
        return config.serve_argv()

    def on_gpus(self, ids: tuple[str, ...]) -> BackendSpec:
        """The backend with its launched servers on GPUs ``ids`` (where it launches any)."""
        return self


class SimBackend(BackendSpec):
    """The embedded simulator: in-process on a virtual clock, or as an HTTP server."""

    kind: Literal["sim"] = "sim"
    clock: Literal["virtual", "http"] = "virtual"
    faults: Faults | None = None
    """Failures to inject on purpose (``kneepoint.records.faults``), to test a run's
    handling of them; None: a healthy server."""

    @property
    def simulated(self) -> bool:
        return True

    @property
    def virtual_clock(self) -> bool:
        return self.clock == "virtual"

    @property
    def unmodeled_knobs(self) -> Mapping[str, str]:
        return SIM_UNMODELED if self.virtual_clock else SIM_HTTP_UNMODELED

    @property
    def injected_faults(self) -> Faults | None:
        return self.faults


class VllmBackend(BackendSpec):
    """Launch real vLLM servers, one per trial, with a configurable command."""

    kind: Literal["vllm"] = "vllm"
    command: tuple[str, ...] = Field(default=("vllm", "serve"), min_length=1)
    """Launch command before the model and flags, e.g. a venv's python -m ...api_server."""
    model_as: Literal["positional", "flag"] = "positional"
    """How the command takes the model: `vllm serve MODEL` or `--model MODEL`."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for the launched server. ``${NAME}`` is read from the agent's
    environment at each launch; a variable whose name looks secret (``*KEY*``, ``*TOKEN*``,
    ``*SECRET*``, ``*PASSWORD*``: HF_TOKEN) must be given that way, never literally, since
    the study is copied into the run folder (``kneepoint.records.secret_env``)."""
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    """The variable of the agent's environment holding the API key to protect the launched
    servers with (they get it as VLLM_API_KEY, never on their command line) and to call
    them with (``Authorization: Bearer``); None: no key."""
    host: str = "127.0.0.1"
    """Where launched servers listen: loopback unless the study says otherwise (any other
    address is logged as a ``server.exposed`` warning)."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """Fixed port; None picks a free one per launch."""
    startup_timeout_s: float = Field(default=900.0, gt=0.0, le=MAX_WAIT_SECONDS)
    gpu_ids: tuple[str, ...] = ()
    """The GPUs launched servers run on (``CUDA_VISIBLE_DEVICES``); (): the environment's.
    A run on several GPU sets sets each step's to the GPUs Ray gave it."""
    vllm_version: str | None = None
    """The release being launched; None asks the environment at run time."""
    preflight_memory: bool = True
    """Refuse configurations the memory model says cannot start. Turn off where the study's
    GPU entry does not describe the device (vLLM's CPU build)."""

    @property
    def launch_command(self) -> tuple[str, ...]:
        return self.command

    @property
    def unmodeled_knobs(self) -> Mapping[str, str]:
        if MODULE_LAUNCHER in self.command:
            return {
                "api_server_count": f"the backend runs `python -m {MODULE_LAUNCHER}`, which "
                "serves from one process whatever --api-server-count says; `vllm serve` "
                "starts several"
            }
        return {}

    @property
    def stated_vllm_version(self) -> str | None:
        return self.vllm_version

    @property
    def api_key_variable(self) -> str | None:
        return self.api_key_env

    @property
    def launch_env(self) -> Mapping[str, str]:
        return self.env

    @property
    def checks_memory(self) -> bool:
        return self.preflight_memory

    def serve_argv(self, config: EngineConfig) -> list[str]:
        return config.serve_argv(self.command, self.model_as)

    def on_gpus(self, ids: tuple[str, ...]) -> VllmBackend:
        return self.model_copy(update={"gpu_ids": ids})

    @model_validator(mode="before")
    @classmethod
    def _from_gpu_index(cls, data: Any) -> Any:
        # Run folders and recordings written with one GPU a server say `gpu_index: N|null`.
        if isinstance(data, dict) and "gpu_index" in data and "gpu_ids" not in data:
            data = dict(data)
            index = data.pop("gpu_index")
            data["gpu_ids"] = () if index is None else (str(index),)
        return data

    @field_validator("command")
    @classmethod
    def _no_key_on_the_command(cls, command: tuple[str, ...]) -> tuple[str, ...]:
        if any(word == "--api-key" or word.startswith("--api-key=") for word in command):
            raise ValueError(
                "--api-key on the command line would be seen in `ps` and written to "
                "best-command.txt: name its variable in backend.api_key_env"
            )
        return command

    @field_validator("env")
    @classmethod
    def _no_literal_secret(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if name == "VLLM_API_KEY":
                raise ValueError(
                    f"{name}: name the key's variable in backend.api_key_env: the server gets "
                    "it as VLLM_API_KEY and is called with it"
                )
            if looks_secret(name) and referenced(value) is None:
                raise ValueError(
                    f"{name}: a secret is not written into the study (it is "
                    f"copied into the run folder): write ${{{name}}} to pass it "
                    "from the agent's environment"
                )
        return env


class AttachBackend(BackendSpec):
    """A server someone else started: measure and diagnose only, no knob can change."""

    kind: Literal["attach"] = "attach"
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$")
    vllm_version: str | None = None
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    """The variable of the agent's environment holding the server's API key, sent as
    ``Authorization: Bearer`` (its value is never written anywhere); None: no key."""

    @property
    def owns_knobs(self) -> bool:
        return False  # someone else started it: measure and diagnose only

    @property
    def stated_vllm_version(self) -> str | None:
        return self.vllm_version

    @property
    def api_key_variable(self) -> str | None:
        return self.api_key_env


Backend = Annotated[SimBackend | VllmBackend | AttachBackend, Field(discriminator="kind")]
