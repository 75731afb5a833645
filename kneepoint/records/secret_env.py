"""Secrets in a study: which environment variables hold one, and how a study refers to a
variable of the agent's environment instead of writing its value.

A study is copied whole into its run folder (``study.yaml``) and read back from there when
the run resumes, so a value written in it would sit on disk beside the results. A study
therefore names variables (``backend.api_key_env``, ``${NAME}`` in ``backend.env``) and the
values are read from the agent's environment each time a server is launched or called.
"""

from __future__ import annotations

import re

ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""What an environment variable's name may be."""
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def looks_secret(name: str) -> bool:
    """Whether a variable's name says it holds a secret (HF_TOKEN, VLLM_API_KEY, ...)."""
    return bool(_SECRET_NAME.search(name))


def referenced(value: str) -> str | None:
    """The variable a ``${NAME}`` value refers to; None for a literal value."""
    found = _REFERENCE.match(value)
    return found.group(1) if found else None
