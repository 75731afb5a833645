"""The traffic a server is measured under: classes of requests and how they arrive.

A workload says nothing about the request rate: sweeps choose rates. Lengths are in tokens and
prompts are sent as token ids, so a class's lengths are exact without a tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from kneepoint.records.base import InputRecord
from kneepoint.records.drafts import DraftAcceptance
from kneepoint.records.lengths import LengthDist, max_length_tokens, mean_length_tokens
from kneepoint.records.limits import MAX_WAIT_SECONDS
from kneepoint.records.session import (
    Session,
    max_turns,
    mean_think_s,
    mean_turns,
    turn_survival,
)


class PrefixGroup(InputRecord):
    """A corpus of documents that requests of a class share as prompt prefixes (RAG-style),
    so prefix caching has something to catch."""

    name: str = Field(min_length=1)
    documents: int = Field(ge=1)
    """How many distinct documents the corpus holds."""
    prefix_tokens: int = Field(ge=1)
    """Length of each document, prepended to the class's own prompt tokens."""
    popularity: Literal["uniform", "zipf", "cycle"] = "uniform"
    """How requests pick a document: at random, evenly (``uniform``) or skewed (``zipf``);
    or in turn, the first to the last and round again (``cycle``), as a benchmark sends a
    fixed prompt set (inference-perf's shared-prefix corpus: request n carries prompt n mod
    its count). Under ``cycle`` each document comes back exactly ``documents`` requests
    later, so a prefix cache too small for all of them evicts each one before it returns."""
    zipf_exponent: float = Field(default=1.1, gt=0.0)
    """Skew of document popularity when ``popularity`` is zipf."""


class TrafficClass(InputRecord):
    """One kind of request: its share of arrivals and its prompt and output lengths."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_\-]+$")
    weight: float = Field(default=1.0, gt=0.0)
    """Relative share of arrivals (normalised over the classes)."""
    input_tokens: LengthDist
    """Prompt tokens of the request's own part (after any shared prefix)."""
    output_tokens: LengthDist
    """Tokens generated (sent as max_tokens with ignore_eos)."""
    prefix_group: str | None = None
    """Name of a prefix group whose documents prefix this class's prompts."""
    session: Session | None = None
    """Conversations: each arrival is a session of turns, ``input_tokens`` each new message
    and ``output_tokens`` each answer (None: each arrival is one request)."""
    speculation: DraftAcceptance | None = None
    """How n-gram drafts fare on its answers, for the simulator (None: none is ever found)."""

    def mean_turns(self) -> float:
        """Requests per arrival: a session's mean turns, else 1."""
        return mean_turns(self.session.turns) if self.session is not None else 1.0

    def mean_history_tokens(self) -> float:
        """The earlier messages and answers a request of this class carries, on average over
        its requests (0 unless conversational): a session's turn t carries t of each."""
        if self.session is None:
            return 0.0
        survival = turn_survival(self.session.turns)
        turns = sum(t * alive for t, alive in enumerate(survival)) / sum(survival)
        each = mean_length_tokens(self.input_tokens) + mean_length_tokens(self.output_tokens)
        return turns * each


class PoissonArrivals(InputRecord):
    """Independent arrivals: exponential gaps at the offered rate."""

    kind: Literal["poisson"] = "poisson"


class GammaArrivals(InputRecord):
    """Gamma-distributed gaps; burstiness is the shape (1 = Poisson, < 1 burstier)."""

    kind: Literal["gamma"] = "gamma"
    burstiness: float = Field(gt=0.0)


class ConstantArrivals(InputRecord):
    """Evenly spaced arrivals at the offered rate."""

    kind: Literal["constant"] = "constant"


TraceFormat = Literal["kneepoint", "mooncake", "azure", "burstgpt"]


class TraceArrivals(InputRecord):
    """Replay of a recorded trace, time-scaled to the offered rate. ``format``: kneepoint's
    JSONL (``TraceEntry`` per line); the Mooncake trace JSONL (``timestamp`` in ms,
    ``input_length``, ``output_length``, ``hash_ids`` of 512-token prompt blocks); the Azure
    LLM inference trace CSV (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``); or
    BurstGPT's CSV (``Timestamp`` in s, ``Request tokens``, ``Response tokens``)."""

    kind: Literal["trace"] = "trace"
    path: Path
    format: TraceFormat = "kneepoint"


ArrivalProcess = Annotated[
    PoissonArrivals | GammaArrivals | ConstantArrivals | TraceArrivals,
    Field(discriminator="kind"),
]


class ClientOptions(InputRecord):
    """How the load generator sends: a cap on requests in flight, when it gives up on one,
    and whether outputs run to their drawn length."""

    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests in flight at most (a closed-loop client, like an application's connection
    pool); None: open loop, every request sent at its scheduled time. A request waiting for
    a slot is the server's slowness, not the client's lag."""
    request_timeout_s: float = Field(default=600.0, gt=0.0, le=MAX_WAIT_SECONDS)
    """A request not finished this long after its scheduled time is cut off and counts as
    failed (against goodput and every percentile)."""
    ignore_eos: bool = True
    """Send ``ignore_eos`` so every answer runs to its drawn length (exact, comparable
    lengths); false lets a real model stop at its end-of-sequence token, and the lengths the
    server reports (its ``usage``) are what is counted. The simulator has no EOS."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Sampling temperature sent with every request (None: the server's default, 1.0 in
    vLLM). Speculative decoding's acceptance rests on it: greedy decoding (0) accepts every
    draft token the model would have picked itself, sampling accepts a one-token n-gram
    draft only with the probability the model gives it. The simulator samples nothing."""


class Workload(InputRecord):
    """Traffic classes, shared-prefix corpora and the arrival process, with a seed."""

    name: str = Field(min_length=1)
    seed: int = 0
    classes: tuple[TrafficClass, ...] = Field(min_length=1)
    prefix_groups: tuple[PrefixGroup, ...] = ()
    arrival: ArrivalProcess = PoissonArrivals()
    client: ClientOptions = ClientOptions()

    @model_validator(mode="after")
    def _references(self) -> Workload:
        _require_unique("classes", [c.name for c in self.classes])
        _require_unique("prefix_groups", [g.name for g in self.prefix_groups])
        groups = {g.name for g in self.prefix_groups}
        for i, cls in enumerate(self.classes):
            if cls.prefix_group is not None and cls.prefix_group not in groups:
                known = ", ".join(sorted(groups)) or "none defined"
                raise ValueError(
                    f"classes[{i}].prefix_group: no prefix group named {cls.prefix_group!r} "
                    f"(groups: {known})"
                )
        if self.conversational and self.arrival.kind == "trace":
            raise ValueError(
                "arrival: a trace replays requests as recorded; sessions of turns need an "
                "arrival process (poisson, gamma or constant)"
            )
        return self

    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes)

    def max_request_tokens(self) -> int:
        """Longest prompt + output any request of this workload can have: a session's last
        turn carries every earlier message and answer."""
        prefix = {g.name: g.prefix_tokens for g in self.prefix_groups}
        return max(
            prefix.get(c.prefix_group or "", 0)
            + (max_turns(c.session.turns) if c.session is not None else 1)
            * (max_length_tokens(c.input_tokens) + max_length_tokens(c.output_tokens))
            for c in self.classes
        )

    @property
    def conversational(self) -> bool:
        """Whether any class comes as sessions of turns."""
        return any(c.session is not None for c in self.classes)

    def session_think_s(self) -> float:
        """A session's mean span of think times, over arrivals (0: no conversations)."""
        total = sum(c.weight for c in self.classes)
        return sum(
            c.weight / total * (c.mean_turns() - 1.0) * mean_think_s(c.session.think_time)
            for c in self.classes
            if c.session is not None
        )

    def mean_turns_per_arrival(self) -> float:
        """Requests an arrival brings on average: what turns a session rate into a request
        rate (sweeps offer requests per second; sessions arrive at that over this)."""
        total = sum(c.weight for c in self.classes)
        return sum(c.weight * c.mean_turns() for c in self.classes) / total


def _require_unique(field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{field}: name {name!r} appears more than once")
        seen.add(name)


class TraceEntry(InputRecord):
    """One line of an arrival trace (JSONL)."""

    timestamp_s: float = Field(ge=0.0)
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    prefix_id: str | None = None
    """Requests with the same prefix_id share their first ``prefix_tokens`` tokens."""
    prefix_tokens: int = Field(default=0, ge=0)
    blocks: tuple[int, ...] = ()
    """The prompt as blocks of ``block_tokens``, by id (Mooncake's ``hash_ids``): requests
    whose prompts start with the same block ids share those tokens, block by block."""
    block_tokens: int = Field(default=512, ge=1)
    traffic_class: str | None = None
    """The workload class the request counts under (default: the first class)."""
