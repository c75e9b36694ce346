"""The key a client address is counted under by every per-address limit.

An IPv4 address is counted alone. An IPv6 client is counted by its /64
(:data:`IPV6_PREFIX`): a subscriber, a host or a LAN is given a whole /64
and picks addresses in it freely (SLAAC, privacy addresses), so counting the
full address would hand one client millions of fresh windows. An
IPv4-mapped IPv6 address (``::ffff:192.0.2.1``, what a dual-stack socket
reports for an IPv4 peer) is that IPv4 address. Anything that is not an
address (a test client's name, a proxy's ``unknown``) is its own key, as
written.

Pure: the console's sign-in failure windows and its room for password
checks, and the guarded look-ups of receiver tokens and API keys
(``receiver.http.client_address``), build their keys here, and the HTTP
server's share of connections per address (``cli.addressshare``).
"""

from __future__ import annotations

import socket

__all__ = ["IPV6_PREFIX", "limit_key"]

IPV6_PREFIX = 64
_IPV4_MAPPED = bytes(10) + b"\xff\xff"  # ::ffff:a.b.c.d


def limit_key(address: str) -> str:
    """``address`` as per-address limits count it: an IPv4 address itself, an IPv6 one's /64 (``2001:db8::/64``)."""
    if ":" not in address:
        return address
    # socket's own conversions: a tenth of the time ipaddress takes, and the HTTP server asks on
    # every connection. The zone (``%eth0``) goes: one host's interfaces are one client.
    try:
        packed = socket.inet_pton(socket.AF_INET6, address.partition("%")[0])
    except OSError:
        return address
    if packed[:12] == _IPV4_MAPPED:
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    network = packed[: IPV6_PREFIX // 8] + bytes(16 - IPV6_PREFIX // 8)
    return f"{socket.inet_ntop(socket.AF_INET6, network)}/{IPV6_PREFIX}"
