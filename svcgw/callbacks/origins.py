"""The origin of a callback address: the part a Bearer token is given to.

A token set for an address is for that address's owner: scheme, host and
port. Two spellings of one origin compare equal: the scheme and host are
case-insensitive, a default port (80 for http, 443 for https) is the same as
none, a host's trailing dot and an IPv6 literal's brackets do not count.
The path and query do not belong to the origin: moving an address within one
host keeps its token (``svcgw.registry.store.Store.set_callback``).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["Origin", "origin", "same_origin"]

Origin = tuple[str, str, int]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> Origin | None:
    """``(scheme, host, port)`` of ``url``, normalised; None when it has no host or a bad port."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return None
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        pass
    scheme = parts.scheme.lower()
    return scheme, host, port if port is not None else _DEFAULT_PORTS.get(scheme, 0)


def same_origin(one: str | None, other: str | None) -> bool:
    """Whether both addresses have one origin; an address without one (or none at all) shares it with none."""
    if not one or not other:
        return False
    first = origin(one)
    return first is not None and first == origin(other)
