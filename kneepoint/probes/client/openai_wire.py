"""The OpenAI-compatible wire as the load generator speaks it: the request body a planned
request becomes, the headers that carry an API key, and what a streamed answer says chunk by
chunk (``Stream``: token-carrying chunk times, usage, ``[DONE]``, errors).

Token-carrying chunks are found from vLLM's per-chunk usage (``continuous_usage_stats``) when
the server sends it, else from non-empty text. Anything but a JSON object where one must be is
a malformed stream: ``ValueError``, which fails that one request.
"""

from __future__ import annotations

import json
from typing import Any

from kneepoint.load import PlannedRequest


def bearer(api_key: str | None) -> dict[str, str]:
    """The headers that carry an API key to a vLLM server (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Stream:
    """What one streamed response has said so far."""

    def __init__(self, sent_s: float) -> None:
        self.sent_s = sent_s
        self.chunk_times: list[float] = []
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.done = False
        self.end_s: float | None = None
        self.error: str | None = None

    def feed(self, line: str, at_s: float) -> None:
        if not line.startswith("data:"):
            return  # blank separators, comments, event names
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            self.end_s = at_s
            return
        chunk = _object(json.loads(payload), "chunk")
        if "error" in chunk:
            self.error = f"stream error: {error_message(chunk)}"
            return
        usage = chunk.get("usage")
        if usage:
            usage = _object(usage, "usage")
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            produced = int(usage.get("completion_tokens") or 0)
            carried = produced > self.output_tokens
            self.output_tokens = produced
        else:
            choices = chunk.get("choices") or ()
            if not isinstance(choices, list):
                raise ValueError(f"choices is not a list: {str(choices)[:60]}")
            carried = any(_choice_text(_object(c, "choice")) for c in choices)
        if carried:
            self.chunk_times.append(at_s)


def _object(value: Any, what: str) -> dict[str, Any]:
    """``value`` where a JSON object must be; a server that sends anything else there has
    sent a malformed stream, which fails its request (ValueError is caught per request)."""
    if not isinstance(value, dict):
        raise ValueError(f"a {what} that is not a JSON object: {str(value)[:60]}")
    return value


def _choice_text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if delta is None:
        return str(choice.get("text") or "")
    return str(_object(delta, "delta").get("content") or "")


def error_message(body: Any) -> str:
    """What an OpenAI-style error body says, in at most 300 characters."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    if isinstance(body, dict) and "message" in body:
        return str(body["message"])
    return str(error if error is not None else body)[:300]


def request_body(
    planned: PlannedRequest, model: str, ignore_eos: bool = True, temperature: float | None = None
) -> dict[str, Any]:
    """A planned request as vLLM's ``/v1/completions`` takes it: token ids, streamed, with
    usage in every chunk so each token-carrying chunk is known (and the workload's sampling
    temperature where it sets one)."""
    sampling = {} if temperature is None else {"temperature": temperature}
    return {
        **sampling,
        "model": model,
        "prompt": list(planned.prompt),
        "max_tokens": planned.max_tokens,
        "ignore_eos": ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
