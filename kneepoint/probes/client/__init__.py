"""The client side of a load point: the OpenAI-compatible load generator (its own HTTP/1.1
client, one request's stream read token by token), the warm-up burst, capped page reads and
the greedy-output quality check."""

from kneepoint.probes.client.capped import PageTooLargeError, capped_text, capped_text_async
from kneepoint.probes.client.loadgen import LoadOptions, run_load
from kneepoint.probes.client.openai_wire import bearer
from kneepoint.probes.client.quality import (
    PROMPTS,
    QualityCheckError,
    greedy_outputs,
    token_agreement,
)
from kneepoint.probes.client.tls import tls_context
from kneepoint.probes.client.warmup import warm_up

__all__ = [
    "PROMPTS",
    "LoadOptions",
    "PageTooLargeError",
    "QualityCheckError",
    "bearer",
    "capped_text",
    "capped_text_async",
    "greedy_outputs",
    "run_load",
    "tls_context",
    "token_agreement",
    "warm_up",
]
