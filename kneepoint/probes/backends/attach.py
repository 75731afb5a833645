"""A server someone else runs, attached to: every configuration is whatever it runs; it must
answer ``/v1/models`` with the study's model; measure and diagnose only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from kneepoint.probes.backends.base import Backend, Endpoint, Opening, server_version
from kneepoint.probes.backends.measure import Instruments
from kneepoint.probes.client import bearer, tls_context
from kneepoint.probes.server import Failure, ServerFailedError, api_key, attached_card, model_cards
from kneepoint.records import AttachBackend, EngineConfig


def attached(o: Opening) -> Backend:
    """The study's attached server."""
    spec = o.study.backend
    assert isinstance(spec, AttachBackend)
    return RunningServer(spec.url, api_key=api_key(o.study))


class RunningServer:
    """A running server: every configuration is whatever it runs."""

    def __init__(self, url: str, *, api_key: str | None = None) -> None:
        self.url, self.api_key = url.rstrip("/"), api_key

    @contextmanager
    def serve(self, config: EngineConfig, trial_dir: Path) -> Iterator[Endpoint]:
        with httpx.Client(
            timeout=10.0, headers=bearer(self.api_key), verify=tls_context()
        ) as client:
            try:
                response = client.get(f"{self.url}/v1/models")
                models = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                failure = Failure("unreachable", f"{self.url} does not answer: {exc}", None, ())
                raise ServerFailedError(failure) from exc
        if response.status_code == 401:
            what = f"{self.url} refuses the request (HTTP 401): " + (
                "it wants an API key; name the variable holding it with --api-key-env "
                "(backend.api_key_env in a study)"
                if self.api_key is None
                else "it does not take the key it was given; check the variable named by "
                "--api-key-env (backend.api_key_env in a study)"
            )
            raise ServerFailedError(Failure("bad_argument", what, None, ()))
        try:
            cards = model_cards(models)
        except ValueError as exc:
            what = f"{self.url}/v1/models does not answer as vLLM does: {exc}"
            raise ServerFailedError(Failure("crashed", what, None, ())) from exc
        card = attached_card(self.url, cards, config)
        yield Endpoint(
            self.url,
            card.id,
            Instruments(),
            version=server_version(self.url, self.api_key),
            api_key=self.api_key,
        )
