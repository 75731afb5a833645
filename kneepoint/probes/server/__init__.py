"""A server's lifecycle: its process group started at a lower CPU priority and stopped whole,
a watchdog for a server that hangs, its failures named in its own words, its identity checked,
and the secrets it is given remembered for redaction (``kneepoint.probes.runtime``)."""

from kneepoint.probes.server.credentials import (
    SERVER_KEY_VARIABLE,
    api_key,
    missing_variables,
    server_env,
)
from kneepoint.probes.server.identity import attached_card, check_identity, model_cards
from kneepoint.probes.server.process import ServerProcess, free_port, reap_orphans
from kneepoint.probes.server.server_failure import (
    Failure,
    FailureKind,
    ServerFailedError,
    address_in_use,
    bound_cores,
    kv_capacity_tokens,
)

__all__ = [
    "SERVER_KEY_VARIABLE",
    "Failure",
    "FailureKind",
    "ServerFailedError",
    "ServerProcess",
    "address_in_use",
    "api_key",
    "attached_card",
    "bound_cores",
    "check_identity",
    "free_port",
    "kv_capacity_tokens",
    "missing_variables",
    "model_cards",
    "reap_orphans",
    "server_env",
]
