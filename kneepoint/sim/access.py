"""Who may reach a server: whether a listen address is loopback only, and the API-key check
``kneepoint sim serve`` makes as ``vllm serve --api-key`` (or ``VLLM_API_KEY``) does.

vLLM's check: every route under ``/v1`` needs ``Authorization: Bearer <key>`` and is answered
401 ``{"error": "Unauthorized"}`` without it; ``/health``, ``/metrics`` and ``/version`` stay
open (health probes and metric scrapers carry no key).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

GUARDED_PREFIXES = ("/v1", "/telemetry")
"""Routes the key guards: vLLM's API, and the simulator's own GPU counters."""


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable only from this machine (127.0.0.0/8, ::1,
    localhost). Anything else, a name included, may be reachable from the network."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiKeyGuard:
    """ASGI middleware: requests to a guarded route without the right bearer token get 401."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._digest = hashlib.sha256(api_key.encode()).digest()

    def _authorised(self, headers: Headers) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        given = hashlib.sha256(token.encode()).digest()
        # compared in constant time: the answer's timing must not spell the key out
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = (
            scope["type"] == "http"
            and scope.get("method") != "OPTIONS"
            and str(scope["path"]).startswith(GUARDED_PREFIXES)
        )
        if guarded and not self._authorised(Headers(scope=scope)):
            response = JSONResponse({"error": "Unauthorized"}, status_code=401)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
