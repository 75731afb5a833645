"""What one request looked like from the client, and summaries of many.

Times are seconds on one monotonic clock, counted from the start of the load point. Latency
counts from ``scheduled_s`` (when the request should have been sent), never from ``sent_s``,
so a client or server that falls behind cannot hide the wait (coordinated omission).
"""

from __future__ import annotations

from itertools import pairwise

from pydantic import Field

from kneepoint.records.base import Record


class RequestRecord(Record):
    """One request: when it was due, sent, answered, and what came back."""

    index: int = Field(ge=0)
    traffic_class: str
    scheduled_s: float
    sent_s: float
    chunk_times_s: tuple[float, ...] = ()
    """Arrival time of each chunk that carried at least one token."""
    end_s: float | None = None
    """When the response finished (None: it never did)."""
    prompt_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    """From the server's usage report where it gave one."""
    error: str | None = None
    """Why the request failed (HTTP status and message, timeout, connection), or None."""
    slot_wait_s: float = Field(default=0.0, ge=0.0)
    """Time spent waiting for a slot under a concurrency cap: the server's slowness holding
    slots, not the client falling behind."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None and bool(self.chunk_times_s)

    @property
    def send_lag_s(self) -> float:
        """How late the client sent it: its own share of any delay."""
        return self.sent_s - self.scheduled_s

    @property
    def client_lag_s(self) -> float:
        """Send lag the client alone is to blame for (a concurrency cap's wait taken out)."""
        return self.sent_s - self.scheduled_s - self.slot_wait_s

    @property
    def ttft_ms(self) -> float:
        """Scheduled send to first token; infinite for a failed request."""
        if not self.ok:
            return float("inf")
        return (self.chunk_times_s[0] - self.scheduled_s) * 1000.0

    @property
    def e2e_ms(self) -> float:
        if not self.ok or self.end_s is None:
            return float("inf")
        return (self.end_s - self.scheduled_s) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """(last token - first token) / (output tokens - 1); None for one-token answers."""
        if not self.ok:
            return float("inf")
        if self.output_tokens < 2:
            return None
        return (self.chunk_times_s[-1] - self.chunk_times_s[0]) * 1000.0 / (self.output_tokens - 1)

    def itls_ms(self) -> list[float]:
        """Gaps between token-carrying chunks."""
        times = self.chunk_times_s
        return [(b - a) * 1000.0 for a, b in pairwise(times)]


class Dist(Record):
    """A latency distribution's summary, in milliseconds (inf when failures dominate)."""

    count: int = Field(ge=0)
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float

    def at(self, percentile: int) -> float:
        return float(getattr(self, f"p{percentile}_ms"))

    def resolves(self, percentile: int) -> bool:
        """Whether the sample is large enough for ``percentile`` to be more than its largest
        values: a p99 needs 100 samples (from fewer it is the maximum, or nearly), a p95 20."""
        return self.count * (100 - percentile) >= 100
