"""Secrets in a study: which environment variables hold one, and how a study refers to a
variable of the agent's environment instead of writing its value.

A study is copied whole into its run folder (``study.yaml``) and read back from there when
the run resumes, so a value written in it would sit on disk beside the results. A study
therefore names variables (``backend.api_key_env``, ``${NAME}`` in ``backend.env``) and the
values are read from the agent's environment each time a server is launched or called.
"""

from __future__ import annotations

import re

SECRET_FLAGS = {
    "--api-key": "name its variable in backend.api_key_env",
    "--hf-token": "pass it as HF_TOKEN in backend.env, written ${HF_TOKEN}",
}
"""vLLM flags whose value is a secret, and where the value goes instead: on a command line it
is seen in `ps` and written to the run folder and best-command.txt."""
MASK = "<redacted>"
# A token ends at whitespace, a quote, a comma, a bracket or a backslash (so a JSON line's
# escapes survive).
_TOKEN = r"[^\s'\",\]}\\]+"
_FLAGS = "|".join(re.escape(flag) for flag in SECRET_FLAGS)
_SHAPES = (
    (re.compile(rf"(\bBearer\s+){_TOKEN}", re.IGNORECASE), rf"\1{MASK}"),
    (re.compile(rf"((?:{_FLAGS})(?:=|\s+(?:-\s+)?|[\"']?\s*,\s*[\"']?)){_TOKEN}"), rf"\1{MASK}"),
    (re.compile(rf"(\bapi_key\W{{0,3}}\s*[:=]\s*\[?\s*\W?)(?!None\b){_TOKEN}"), rf"\1{MASK}"),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), MASK),
)
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


def mask_shapes(text: str) -> str:
    """``text`` with every secret-shaped token replaced: ``Bearer <token>``, the value after a
    secret flag (``--api-key v``, ``--api-key=v``, ``"--api-key", "v"`` in a JSON or YAML
    list), an ``api_key`` in an argument dump, Hugging Face (``hf_...``) and OpenAI-style
    (``sk-...``) tokens."""
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text
