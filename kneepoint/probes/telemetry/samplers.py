"""Telemetry sampled during a load point, on the load point's clock.

``HttpSampler`` polls the server's ``/metrics`` (and, for the simulator, its ``/telemetry``)
on a schedule, and keeps which of the scrapes due landed (CPU readings are
``kneepoint.probes.telemetry.cpu``'s). A source that fails or does not exist yields nothing: none of
them raises into the measurement.

Scraping is not free for a small server: vLLM's API server renders the page (about 50 KB
from the CPU build) on the thread that streams its tokens. An adaptive sampler therefore
waits at least ``COST_FACTOR`` times as long as the last scrape took before the next one
(``benchmarks/scrape_cost.py`` measures what a scrape costs the server).
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import structlog

from kneepoint.probes.client import PageTooLargeError, bearer, capped_text_async, tls_context
from kneepoint.probes.runtime import Clock
from kneepoint.probes.telemetry.prom import Scrape, parse_metrics
from kneepoint.records import GpuSample

log = structlog.get_logger(__name__)
COST_FACTOR = 200.0
"""An adaptive sampler waits at least this many times the last scrape's duration, so that
scraping holds the server's API thread under 0.5% of the time. Scraped every 0.5 s (2-3% of
the thread: 13-15 ms a scrape), the CPU build's TTFT mean near its knee rose 2.96x and its
preemptions 1.85x (median of 5 A/B pairs at 28 req/s, ``benchmarks/scrape_cost.py``); every
3 s, the scraped run was the better of its pair in 4 of 5."""
MAX_INTERVAL_S = 10.0
"""However slow a scrape, the next is due within this: the gauges still get a few samples
per point, and a hung server is still told from a busy one well inside a minute."""
SCRAPE_TIMEOUT_S = 10.0
"""A scrape a busy server answers late still lands; one that takes longer is missed."""


class HttpSampler:
    """Scrapes of ``/metrics``, and GPU samples from ``/telemetry`` where the server has one."""

    def __init__(
        self,
        url: str,
        clock: Clock,
        *,
        interval_s: float = 0.5,
        sim_telemetry: bool = False,
        api_key: str | None = None,
        adaptive: bool = False,
    ) -> None:
        """``interval_s``: between scrapes (with ``adaptive``, the least)."""
        self.url, self.clock, self.interval_s = url, clock, interval_s
        self.base_interval_s, self.adaptive = interval_s, adaptive
        self.due: list[tuple[float, bool]] = []
        """(when a scheduled scrape was due, whether it landed), bracketing scrapes aside."""
        self.sim_telemetry = sim_telemetry
        self._headers = bearer(api_key)  # vLLM leaves /metrics open; /telemetry is guarded
        self._raw: list[tuple[float, str]] = []
        self._parsed: list[Scrape] = []
        self.first_text: str | None = None
        self.last_text: str | None = None
        """The first and last ``/metrics`` text, kept as the point's metric snapshots."""
        self.gpu: list[GpuSample] = []
        self.errors = 0
        self.answered_s = clock.now()
        """When the server last answered anything (an error status counts: it is alive); the
        load generator tells it too (``heard``), each time a request ends."""

    async def scrape_once(self, client: httpx.AsyncClient) -> None:
        """Fetch ``/metrics`` and keep the text: parsing waits until the load is over, so
        that it never delays a send on the generator's event loop."""
        began = self.clock.now()
        try:
            status, text = await capped_text_async(client, f"{self.url}/metrics")
            self.answered_s = self.clock.now()
            if status >= 400:
                raise httpx.HTTPError(f"HTTP {status}")
        except (httpx.HTTPError, PageTooLargeError) as exc:
            self.errors += 1
            log.debug("metrics.scrape_failed", url=self.url, error=str(exc))
            return
        took = self.clock.now() - began
        if self.adaptive:
            self.interval_s = min(MAX_INTERVAL_S, max(self.base_interval_s, COST_FACTOR * took))
        self._raw.append((self.clock.now(), text))
        if self.first_text is None:
            self.first_text = text
        self.last_text = text

    def heard(self) -> None:
        """The server answered a request: it is alive, however late its scrapes."""
        self.answered_s = self.clock.now()

    def share_landed(self, start_s: float, end_s: float) -> float | None:
        """Share of the scrapes due between ``start_s`` and ``end_s`` that landed (None where
        none was due)."""
        due = [landed for at, landed in self.due if start_s <= at <= end_s]
        return sum(due) / len(due) if due else None

    def scrapes(self) -> list[Scrape]:
        """Every scrape so far, parsed (unparseable ones are counted in ``errors``)."""
        parsed = []
        for at_s, text in self._raw:
            try:
                parsed.append(parse_metrics(text, at_s))
            except ValueError as exc:
                self.errors += 1
                log.warning("metrics.unparseable", url=self.url, error=str(exc))
        self._raw = []
        self._parsed += parsed
        return list(self._parsed)

    async def _gpu_once(self, client: httpx.AsyncClient) -> None:
        try:
            response = await client.get(
                f"{self.url}/telemetry", params={"window_s": self.interval_s}
            )
            response.raise_for_status()
            sample = GpuSample.model_validate(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            self.errors += 1
            log.debug("telemetry.sample_failed", url=self.url, error=str(exc))
            return
        # The server's window is on its own clock: re-anchor it on ours.
        end = self.clock.now()
        span = sample.end_s - sample.start_s
        self.gpu.append(sample.model_copy(update={"start_s": end - span, "end_s": end}))

    async def run(self, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        """Sample until ``stop`` is set, then once more (so the window's end is covered).
        ``ready`` is set after the first scrape: the baseline every counter is read from.
        The first and the last scrape bracket the load, so each is tried again where it
        fails: a lost one moves the bracket inside the load and leaves requests out of every
        counter's delta (a CI run on a busy machine once counted 23 of 24 TTFTs)."""
        timeout = max(SCRAPE_TIMEOUT_S, self.interval_s * 4)
        async with httpx.AsyncClient(
            timeout=timeout, headers=self._headers, verify=tls_context()
        ) as client:
            await self._bracket(client)
            due = self.clock.now()
            while True:
                if self.sim_telemetry:
                    await self._gpu_once(client)
                if ready is not None:
                    ready.set()
                due = self._next_due(due)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, due - self.clock.now()))
                if stop.is_set():
                    await self._bracket(client)
                    if self.sim_telemetry:  # GPU time up to the load's very end
                        await self._gpu_once(client)
                    return
                kept = len(self._raw)
                await self.scrape_once(client)
                self.due.append((due, len(self._raw) > kept))

    def _next_due(self, last_due: float) -> float:
        """The next scrape's time on the schedule; those the last scrape overran are missed
        (a server too busy to answer is a server whose gauges go unsampled)."""
        due = last_due + self.interval_s
        now = self.clock.now()
        while due < now:
            self.due.append((due, False))
            due += self.interval_s
        return due

    async def _bracket(self, client: httpx.AsyncClient, tries: int = 3) -> None:
        """A scrape that must land: up to ``tries`` attempts (a server without ``/metrics``
        answers 404 at once, so this costs it nothing)."""
        for _ in range(tries):
            kept = len(self._raw)
            await self.scrape_once(client)
            if len(self._raw) > kept:
                return
