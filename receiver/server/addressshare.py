"""Open connections per client address in one server process, each address held to its share.

The HTTP server takes at most ``SVCGW_HTTP_LIMIT_CONCURRENCY`` connections
at once; without a share, one client could hold all of them (slowly, at a
few bytes a second each) and every other client would be answered 503.
:class:`AddressShare` counts the open connections of each client address
and refuses a new one past ``SVCGW_HTTP_CONNECTIONS_PER_ADDRESS`` (by
default an eighth of the cap), so that other addresses keep their places.

A client address is the peer of the TCP connection: an IPv4 address, or
the network of an IPv6 one that one subscriber holds (``SVCGW_IPV6_PREFIX``,
a /56 by default: :mod:`svcgw.clientkeys`), an IPv4-mapped IPv6 address
counting as its IPv4 address. Peers named in
``SVCGW_TRUSTED_PROXIES`` are not counted: a proxy carries every client's
connections, and limits them per client itself (nginx's ``limit_conn``).

Each server process counts its own connections against its own cap
(``SVCGW_HTTP_WORKERS``), so the share holds across processes too: the
kernel spreads one address's connections over them.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from typing import Any

from svcgw.clientkeys import IPV6_PREFIX, limit_key

__all__ = ["AddressShare", "client_address"]

log = logging.getLogger("svcgw")

# Peers whose verdict (exempt or not) is remembered; past this, the memory starts over.
_VERDICTS_KEPT = 4096


def client_address(peer: Any, ipv6_prefix: int = IPV6_PREFIX) -> str | None:
    """The address a connection from ``peer`` (a socket's peername) counts against; None for no address."""
    if not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
        return None  # a Unix socket: no client address to tell apart
    return limit_key(peer[0], ipv6_prefix)


class AddressShare:
    """At most ``share`` open connections per client address (:func:`client_address`), ``exempt`` peers aside."""

    __slots__ = ("_everyone_exempt", "_exempt", "_full", "_open", "_verdicts", "ipv6_prefix", "share")

    def __init__(self, share: int, exempt: Iterable[str] = (), *, ipv6_prefix: int = IPV6_PREFIX) -> None:
        if share < 1:
            raise ValueError(f"a share of at least one connection, got {share}")
        self.share = share
        self.ipv6_prefix = ipv6_prefix
        exempt = tuple(exempt)
        self._everyone_exempt = "*" in exempt
        self._exempt = tuple(ipaddress.ip_network(network, strict=False) for network in exempt if network != "*")
        self._verdicts: dict[str, bool] = {}
        self._open: dict[str, int] = {}
        self._full: set[str] = set()  # addresses at their share, told of in the log once each time

    def counted_address(self, peer: Any) -> str | None:
        """The address a connection from ``peer`` counts against; None when it is not counted."""
        address = client_address(peer, self.ipv6_prefix)
        if address is None or self._is_exempt(peer[0]):
            return None
        return address

    def take(self, address: str) -> bool:
        """Count a new connection from ``address``; False, counting nothing, when it has its share already."""
        held = self._open.get(address, 0)
        if held >= self.share:
            if address not in self._full:
                self._full.add(address)
                log.warning(
                    "client %s holds %d connections, its share of this server process; refusing more", address, held
                )
            return False
        self._open[address] = held + 1
        return True

    def release(self, address: str) -> None:
        """A connection that :meth:`take` counted against ``address`` has closed."""
        held = self._open.get(address, 0) - 1
        if held > 0:
            self._open[address] = held
        else:
            self._open.pop(address, None)
        self._full.discard(address)

    def held(self, address: str) -> int:
        """The connections open from ``address`` (as :func:`client_address` names it)."""
        return self._open.get(address, 0)

    def _is_exempt(self, host: str) -> bool:
        if self._everyone_exempt or not self._exempt:
            return self._everyone_exempt
        verdict = self._verdicts.get(host)
        if verdict is None:
            try:
                address = ipaddress.ip_address(host.partition("%")[0])
            except ValueError:
                return False
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            verdict = any(address in network for network in self._exempt)
            if len(self._verdicts) >= _VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[host] = verdict
        return verdict
