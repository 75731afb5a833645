"""Reading a server's pages with a ceiling on their size: a server that answers ``/metrics``
with tens of megabytes must cost a failed scrape, not the agent's memory and minutes:
parsing a page that size takes minutes and gigabytes."""

from __future__ import annotations

import httpx

from kneepoint.records import KneepointError

MAX_PAGE_BYTES = 4 * 2**20
"""vLLM's own /metrics pages are 54-56 KB (tests/fixtures/metrics: 0.32.0 on a CPU, 0.26.0 on
an H200); a page 70 times that is read as what it is, not parsed."""


class PageTooLargeError(KneepointError):
    """A page past ``MAX_PAGE_BYTES``: what is read of it is dropped."""

    def __init__(self, url: str, limit: int) -> None:
        super().__init__(f"{url} answered more than {limit // 2**20} MiB; not read")


def capped_text(client: httpx.Client, url: str, limit: int = MAX_PAGE_BYTES) -> tuple[int, str]:
    """The status and text of ``GET url``; PageTooLargeError past ``limit`` bytes."""
    with client.stream("GET", url) as response:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                raise PageTooLargeError(url, limit)
        return response.status_code, body.decode(response.encoding or "utf-8", "replace")


async def capped_text_async(
    client: httpx.AsyncClient, url: str, limit: int = MAX_PAGE_BYTES
) -> tuple[int, str]:
    """``capped_text`` on an async client."""
    async with client.stream("GET", url) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limit:
                raise PageTooLargeError(url, limit)
        return response.status_code, body.decode(response.encoding or "utf-8", "replace")
