"""Secrets in a study: which environment variables hold one, and how a study refers to a
variable of the agent's environment instead of writing its value.

A study is copied whole into its run folder (``study.yaml``) and read back from there when
the run resumes, so a value written in it would sit on disk beside the results. A study
therefore names variables (``backend.api_key_env``, ``${NAME}`` in ``backend.env``) and the
values are read from the agent's environment each time a server is launched or called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_FLAGS = {
    "--api-key": "name its variable in backend.api_key_env",
    "--hf-token": "pass it as HF_TOKEN in backend.env, written ${HF_TOKEN}",
}
"""vLLM flags whose value is a secret, and where the value goes instead: on a command line it
is seen in `ps` and written to the run folder and best-command.txt."""
ELSEWHERE = "kneepoint has no safe way to pass it: give it to the server outside the study"
"""Where a flag that only looks secret (``--ssl-keyfile-password``) goes instead."""
_SECRET_WORDS = ("key", "token", "password", "passwd", "secret")
"""A flag ending in one of these takes a secret (``--hf-token``, ``--ssl-keyfile-password``);
``--ssl-keyfile`` and ``--max-num-batched-tokens`` do not end so."""
MIN_ABBREVIATION = 6
"""vLLM's parser (argparse, abbreviations allowed) takes ``--api-k`` for ``--api-key``; a
prefix this long or longer of a secret flag is treated as that flag (shorter ones are
ambiguous there and refused by vLLM itself)."""
MASK = "<redacted>"
# A token ends at whitespace, a quote, a comma, a bracket or a backslash (so a JSON line's
# escapes survive).
_TOKEN = r"[^\s'\",\]}\\]+"


def _prefixes(flag: str) -> str:
    """A pattern of ``flag`` and its abbreviations, ``-`` and ``_`` alike."""
    name = flag[2:].replace("-", "[-_]")
    parts = [p for p in re.split(r"(\[-_\])", name) if p]
    chars: list[str] = []
    for part in parts:
        chars.extend([part] if part == "[-_]" else list(part))
    head, tail = chars[: MIN_ABBREVIATION - 2], chars[MIN_ABBREVIATION - 2 :]
    optional = "".join(f"(?:{c}" for c in tail) + ")?" * len(tail)
    return "--" + "".join(head) + optional


_WORDS = "|".join(_SECRET_WORDS)
_FLAGS = "|".join([*(_prefixes(flag) for flag in SECRET_FLAGS), rf"--[\w-]*[-_](?:{_WORDS})"])
_SHAPES = (
    (re.compile(rf"(\bBearer\s+){_TOKEN}", re.IGNORECASE), rf"\1{MASK}"),
    (
        re.compile(rf"((?:{_FLAGS})(?:=|\s+(?:-\s+)?|[\"']?\s*,\s*[\"']?)){_TOKEN}"),
        rf"\1{MASK}",
    ),
    # An argument dump (``api_key=['v']``, ``'api_key': 'v'``); not a field's path in a
    # message (``backend.api_key: unknown key``), whose ``=`` form (a --set) is masked.
    (
        re.compile(rf"((?<!\.)\bapi_key\W{{0,3}}\s*[:=]\s*\[?\s*\W?)(?!None\b){_TOKEN}"),
        rf"\1{MASK}",
    ),
    (re.compile(rf"(\.api_key\s*=\s*)(?!None\b){_TOKEN}"), rf"\1{MASK}"),
    # Hugging Face tokens are hf_ and 34 letters and digits; a shorter one is still a token
    # (hf_internal_testing, a model's organisation, is not: it goes on past the letters).
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}\b"), MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), MASK),
)
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""What an environment variable's name may be."""
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def looks_secret(name: str) -> bool:
    """Whether a variable's name says it holds a secret (HF_TOKEN, VLLM_API_KEY, ...)."""
    return bool(_SECRET_NAME.search(name))


_CREDENTIAL_URL = re.compile(r"://[^/@\s]+:[^/@\s]+@")


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment less what looks like a secret: a variable named like one
    (HF_TOKEN, PGPASSWORD, ...) or a URL with a password in it. A launched server gets
    only the secrets its study names (``backend.env``, ``backend.api_key_env``): a driver's
    or Ray worker's environment is no server's."""
    return {
        name: value
        for name, value in environ.items()
        if not looks_secret(name) and not _CREDENTIAL_URL.search(value)
    }


def referenced(value: str) -> str | None:
    """The variable a ``${NAME}`` value refers to; None for a literal value."""
    found = _REFERENCE.match(value)
    return found.group(1) if found else None


def secret_flag(arg: str) -> str | None:
    """The secret flag ``arg`` passes (``--hf_token=v``, ``--api-k`` and ``--hf-token`` all
    pass ``--hf-token``; ``--ssl-keyfile-password`` passes itself), or None."""
    flag = arg.split("=", 1)[0].replace("_", "-").lower()
    if not flag.startswith("--"):
        return None
    for known in SECRET_FLAGS:
        if known.startswith(flag) and len(flag) >= MIN_ABBREVIATION:
            return known
    return flag if flag.endswith(tuple("-" + word for word in _SECRET_WORDS)) else None


def where_instead(flag: str) -> str:
    """How to pass the secret ``flag`` (from ``secret_flag``) takes instead."""
    return SECRET_FLAGS.get(flag, ELSEWHERE)


def secret_shaped(value: str) -> bool:
    """Whether ``value`` holds something secret-shaped (a Hugging Face or OpenAI-style token,
    a secret flag's value)."""
    return mask_shapes(value) != value


def mask_shapes(text: str) -> str:
    """``text`` with every secret-shaped token replaced: ``Bearer <token>``, the value after a
    secret flag (``--api-key v``, ``--api-key=v``, ``"--api-key", "v"`` in a JSON or YAML
    list), an ``api_key`` in an argument dump, Hugging Face (``hf_...``) and OpenAI-style
    (``sk-...``) tokens."""
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text
