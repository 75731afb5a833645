"""Secrets taken out of text before it is kept: log events, failure causes, ledger lines.

Two nets. Known values: the API key the run read from its environment (remembered when it is
read) and the value of every variable of the agent's environment whose name looks secret
(``kneepoint.records.secret_env``). Known shapes: ``Bearer <token>``, ``--api-key <value>``,
an ``api_key`` in a logged argument dump, Hugging Face (``hf_...``) and OpenAI-style
(``sk-...``) tokens. Either is replaced by ``<redacted>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kneepoint.records import MASK, looks_secret, mask_shapes, secret_flag

REDACTED = MASK
MIN_SECRET_CHARS = 6
"""Shorter values of secret-looking variables are not searched for: they would blank
ordinary words and numbers, and a secret that short protects nothing anyway."""
_remembered: set[str] = set()


def remember_secret(value: str) -> None:
    """Redact ``value`` from now on, wherever it appears (a key read from the environment)."""
    if len(value) >= MIN_SECRET_CHARS:
        _remembered.add(value)


def known_secrets() -> list[str]:
    """Every value to redact, longest first (one may contain another)."""
    from_env = {v for k, v in os.environ.items() if looks_secret(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(_remembered | from_env, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every known secret and every secret-shaped token replaced."""
    for value in known_secrets():
        if value in text:
            text = text.replace(value, REDACTED)
    return mask_shapes(text)


def redact_all(value: Any) -> Any:
    """``redact`` over every string in a structure of dicts, lists and tuples."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):  # an argv: the word after a secret flag is the secret
        after_flag = [i > 0 and _takes_secret(value[i - 1]) for i in range(len(value))]
        return type(value)(
            REDACTED if flagged else redact_all(v)
            for v, flagged in zip(value, after_flag, strict=True)
        )
    return value


def _takes_secret(word: object) -> bool:
    """Whether ``word`` is a secret flag whose value is the next word of an argv."""
    return isinstance(word, str) and "=" not in word and secret_flag(word) is not None


def redact_file(path: Path) -> None:
    """Rewrite ``path`` with its secrets taken out (a server's log holds whatever it printed:
    its argument dump, a token in a traceback), replacing it whole so no half-written copy
    is left; a file without secrets is left untouched."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return
    cleaned = redact(text)
    if cleaned != text:
        partial = path.with_name(path.name + ".redacting")
        partial.write_text(cleaned)
        os.replace(partial, path)
