"""How n-gram speculative decoding fares on a traffic class's answers: the share of decoding
steps that find a draft, and the share of drafts accepted at each position. It is a property of
the traffic (and of the client's temperature), not of the server: the simulator draws its
drafts from it, and vLLM's spec-decode counters read the same two quantities off a real server
(``kneepoint.records.loadpoint.SpecReading``)."""

from __future__ import annotations

import itertools
from typing import Annotated

from pydantic import Field, JsonValue, model_validator

from kneepoint.records.base import InputRecord, Record
from kneepoint.records.loadpoint import SpecReading

Share = Annotated[float, Field(ge=0.0, le=1.0)]


class DraftAcceptance(InputRecord):
    """A class's n-gram drafts, as vLLM's counters would read them. Published for reference:
    Llama-3.1-8B rewriting code (vdaita/edit_5k_char, n-gram lookup 2-5, 5 draft tokens;
    vllm-project/vllm PR #24344) drafted at 55% of its decoding steps (993 drafts, 5,376
    tokens, 3,562 accepted) and accepted 0.81, 0.74, 0.70, 0.68, 0.66 of drafts at positions
    1-5; free chat at temperature 1 accepts next to nothing (benchmarks/README.md,
    speculation_cpu.py)."""

    drafted_share: Share
    """Share of decoding steps whose context holds the draft's pattern: an n-gram draft needs
    its last tokens seen earlier in the prompt or the answer, and vLLM counts a draft only
    where it found one."""
    accepted_by_position: tuple[Share, ...] = Field(min_length=1)
    """Share of drafts whose i-th token is accepted (a token counts only after every one
    before it, so the shares do not rise). Positions past the list carry on the last ratio
    between neighbours (``kneepoint.physics.speculation.tokens_per_draft``)."""

    @model_validator(mode="after")
    def _falling(self) -> DraftAcceptance:
        shares = self.accepted_by_position
        if any(b > a for a, b in itertools.pairwise(shares)):
            raise ValueError(
                "accepted_by_position must not rise: a draft's token is accepted only after "
                f"every one before it (got {list(shares)})"
            )
        return self


class AcceptanceProbe(Record):
    """How drafts fared on the study's traffic before any trial speculated: the starting
    configuration with n-gram speculation on, one low rate, vLLM's spec-decode counters read
    over its window (``kneepoint.tune.acceptance_step``)."""

    speculative_config: dict[str, JsonValue]
    """The setting probed: the knob's longest draft, so every shorter one reads off it."""
    rate_rps: float = Field(gt=0.0)
    reading: SpecReading | None = None
    """The counters over the window (None: no draft was verified there, or no counters)."""
    failure: str | None = None
    """Why nothing could be read: the server with speculation on did not start or died (the
    server's own words), or refused the setting."""
    device_s: float = Field(default=0.0, ge=0.0)
