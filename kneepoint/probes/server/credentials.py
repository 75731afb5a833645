"""A study's secrets read from the agent's environment when a server is launched or called.

The study names variables (``backend.api_key_env``; ``${NAME}`` values in ``backend.env``),
never values (``kneepoint.records.secret_env``). Each value read here is remembered for
redaction (``kneepoint.probes.runtime.redaction``), so it never reaches a log, the ledger or a
report.
A variable the study names but the environment lacks is a ConfigError naming the field and
the variable: the CLI prints it as one line and exits 2, before any server starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kneepoint.config import ConfigError, Loc, Problem
from kneepoint.probes.runtime import remember_secret
from kneepoint.records import StudySpec, VllmBackend, referenced

SERVER_KEY_VARIABLE = "VLLM_API_KEY"
"""Where vLLM (and ``kneepoint sim serve``) reads its API key from, besides --api-key."""


def missing_variables(
    study: StudySpec, environ: Mapping[str, str] | None = None
) -> list[tuple[Loc, str]]:
    """(field, problem) for each variable the study's backend names that is not set."""
    environ = os.environ if environ is None else environ
    backend = study.backend
    wanted: list[tuple[Loc, str]] = []
    if backend.api_key_variable is not None:
        wanted.append((("backend", "api_key_env"), backend.api_key_variable))
    for name, value in backend.launch_env.items():
        source = referenced(value)
        if source is not None:
            wanted.append((("backend", "env", name), source))
    return [(loc, _unset(name)) for loc, name in wanted if not environ.get(name)]


def _unset(name: str) -> str:
    return f"{name} is not set in the agent's environment (the study reads its value from there)"


def _read(name: str, loc: Loc, study: StudySpec) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConfigError([Problem(f"study {study.name}", None, loc, _unset(name))])
    remember_secret(value)
    return value


def api_key(study: StudySpec) -> str | None:
    """The key the study's server is protected with and called with; None: no key."""
    variable = study.backend.api_key_variable
    return None if variable is None else _read(variable, ("backend", "api_key_env"), study)


def server_env(study: StudySpec, spec: VllmBackend, key: str | None) -> dict[str, str]:
    """The variables a launched server gets: ``backend.env`` with each ``${NAME}`` read from
    the agent's environment, and the API key as VLLM_API_KEY (never on its command line)."""
    env = {}
    for name, value in spec.env.items():
        source = referenced(value)
        env[name] = value if source is None else _read(source, ("backend", "env", name), study)
    if key is not None:
        env[SERVER_KEY_VARIABLE] = key
    if spec.gpu_ids:  # the GPUs a pool gave this step's server
        env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.gpu_ids)
    return env
