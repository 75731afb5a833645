"""One TLS context for the HTTP clients a process makes: httpx builds its own for each client
it opens, loading every trusted certificate again (20 ms of CPU a client), and the probes open
one per health poll, identity check, version read and telemetry scrape."""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The context httpx makes for a client by default (verified against its trust store, or
    the SSL_CERT_FILE or SSL_CERT_DIR the environment names), made once for the process."""
    return httpx.create_ssl_context()
