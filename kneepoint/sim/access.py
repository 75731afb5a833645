"""Who may reach a server: whether a listen address is reachable only from this machine."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable only from this machine (127.0.0.0/8, ::1,
    localhost). Anything else, a name included, may be reachable from the network."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
