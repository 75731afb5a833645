"""Where a study's servers come from (``backend`` in a study): the embedded simulator, real
``vllm serve`` launched per configuration, or a running server to attach to. Secrets never sit
in a study: an API key travels in an environment variable the study names."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from kneepoint.records.base import InputRecord
from kneepoint.records.faults import Faults
from kneepoint.records.limits import MAX_WAIT_SECONDS
from kneepoint.records.secret_env import ENV_NAME, looks_secret, referenced


class SimBackend(InputRecord):
    """The embedded simulator: in-process on a virtual clock, or as an HTTP server."""

    kind: Literal["sim"] = "sim"
    clock: Literal["virtual", "http"] = "virtual"
    faults: Faults | None = None
    """Failures to inject on purpose (``kneepoint.records.faults``), to test a run's
    handling of them; None: a healthy server."""


class VllmBackend(InputRecord):
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
    gpu_index: int | None = Field(default=None, ge=0)
    """The GPU launched servers run on (``CUDA_VISIBLE_DEVICES``) and NVML reads; None: the
    environment's GPUs, NVML index 0. ``kneepoint worker --gpu N`` sets it."""
    vllm_version: str | None = None
    """The release being launched; None asks the environment at run time."""
    preflight_memory: bool = True
    """Refuse configurations the memory model says cannot start. Turn off where the study's
    GPU entry does not describe the device (vLLM's CPU build)."""

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


class AttachBackend(InputRecord):
    """A server someone else started: measure and diagnose only, no knob can change."""

    kind: Literal["attach"] = "attach"
    url: str = Field(pattern=r"^https?://[^\s/]+(/\S*)?$")
    vllm_version: str | None = None
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    """The variable of the agent's environment holding the server's API key, sent as
    ``Authorization: Bearer`` (its value is never written anywhere); None: no key."""


Backend = Annotated[SimBackend | VllmBackend | AttachBackend, Field(discriminator="kind")]
