"""The OpenAI-compatible request and response shapes the simulated server speaks.

Requests are parsed leniently (clients send many fields the simulator has no use for) but
checked where it matters: the model name, a prompt, ``max_tokens``, ``n``. Prompts may be token
ids (exact lengths, no tokenizer) or text, which is cut into 4-byte pieces, one token each, so
equal text prefixes give equal token prefixes and prefix caching still sees them. The engine
never stops early: every request generates ``max_tokens`` tokens, as with ``ignore_eos``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_VOCAB = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with")
_FIRST_TEXT_ID = 1000
_TEXT_ID_SPAN = 30_000


class ApiError(Exception):
    """An error answered as vLLM answers it: status code, type and message."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": None,
                "code": self.status,
            },
        }


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False
    continuous_usage_stats: bool = False
    """vLLM's extension: every chunk carries the usage so far (with include_usage)."""


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


def text_token_ids(text: str) -> tuple[int, ...]:
    """A deterministic stand-in tokenizer: one token per 4 bytes of UTF-8."""
    data = text.encode("utf-8")
    return tuple(
        _FIRST_TEXT_ID + int.from_bytes(data[i : i + 4], "little") % _TEXT_ID_SPAN
        for i in range(0, len(data), 4)
    )


def completion_prompt(req: CompletionRequest) -> tuple[int, ...]:
    prompt = req.prompt
    if isinstance(prompt, str):
        return text_token_ids(prompt)
    if not prompt:
        raise ApiError(400, "The prompt cannot be empty.")
    if len(prompt) != 1 and not all(isinstance(p, int) for p in prompt):
        raise ApiError(400, "batched prompts are not supported by the simulator; send one")
    first = prompt[0]
    if isinstance(first, str):
        return text_token_ids(first)
    if isinstance(first, list):
        return tuple(first)
    return tuple(int(p) for p in prompt)  # type: ignore[arg-type]


def chat_prompt(req: ChatRequest) -> tuple[int, ...]:
    parts = []
    for message in req.messages:
        content = message.content
        if isinstance(content, list):
            content = "".join(str(part.get("text", "")) for part in content)
        parts.append(f"<|{message.role}|>{content or ''}")
    return text_token_ids("".join(parts) + "<|assistant|>")


_COMPLETION_TOKENS = '"completion_tokens":'


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as compact JSON, as vLLM writes them."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def token_text(token_id: int) -> str:
    return " " + _VOCAB[token_id % len(_VOCAB)]


class Responder:
    """Builds the JSON bodies of one response, completion or chat, streamed or not."""

    def __init__(self, kind: str, model: str, prompt_tokens: int) -> None:
        self.chat = kind == "chat"
        prefix = "chatcmpl" if self.chat else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.model, self.prompt_tokens = model, prompt_tokens
        self.created = int(time.time())
        self._around: tuple[bytes, bytes, bytes, bytes] | None = None

    def _envelope(self, streaming: bool) -> dict[str, Any]:
        if self.chat:
            obj = "chat.completion.chunk" if streaming else "chat.completion"
        else:
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def usage(self, completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }

    def chunk(
        self, text: str, finish_reason: str | None, first: bool, so_far: int | None = None
    ) -> dict[str, Any]:
        """One streamed chunk; ``so_far`` (tokens generated so far) adds a usage report."""
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if first:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason
        choice["stop_reason"] = None
        body = {**self._envelope(True), "choices": [choice]}
        if so_far is not None:
            body["usage"] = self.usage(so_far)
        return body

    def chunk_event(
        self, text: str, finish_reason: str | None, first: bool, so_far: int | None = None
    ) -> bytes:
        """``chunk`` as one server-sent event. The common chunk (neither the first nor the
        last) is the same bytes around its text and token counts each time, built once: the
        server writes one per token per request, and json.dumps of the whole body cost more
        than the rest of the server's work on it."""
        if first or finish_reason is not None:
            return sse_event(self.chunk(text, finish_reason, first, so_far))
        if self._around is None:
            self._around = self._template()
        head, tail, middle, end = self._around
        if so_far is None:
            return head + json.dumps(text).encode() + tail
        counts = f"{self.prompt_tokens + so_far},{_COMPLETION_TOKENS}{so_far}".encode()
        return head + json.dumps(text).encode() + middle + counts + end

    def _template(self) -> tuple[bytes, bytes, bytes, bytes]:
        """The common chunk's bytes around its text (head, tail), and with a usage report
        around its total and completion tokens (head, middle, end)."""
        marker = "\x00"  # json.dumps writes it as an escape no text can contain
        quoted = json.dumps(marker).encode()
        head, tail = sse_event(self.chunk(marker, None, False)).split(quoted)
        with_usage = sse_event(self.chunk(marker, None, False, so_far=0)).split(quoted)[1]
        before, after = with_usage.split(f"{self.prompt_tokens},{_COMPLETION_TOKENS}0".encode())
        return head, tail, before, after

    def usage_chunk(self, completion_tokens: int) -> dict[str, Any]:
        return {**self._envelope(True), "choices": [], "usage": self.usage(completion_tokens)}

    def whole(self, text: str, completion_tokens: int) -> dict[str, Any]:
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        return {
            **self._envelope(False),
            "choices": [choice],
            "usage": self.usage(completion_tokens),
        }
