"""The key a client address is counted under by every per-address limit.

An IPv4 address is counted alone. An IPv6 client is counted by the network
a subscriber really holds: by default its /56 (:data:`IPV6_PREFIX`,
``SVCGW_IPV6_PREFIX``). An ISP delegates a /56 (often a /48) to one home or
office line, 256 /64s that its owner may use at will, and each host picks
addresses in a /64 freely (SLAAC, privacy addresses): counting the full
address, or the /64, would hand one line hundreds to millions of fresh
windows and connection shares. An IPv4-mapped IPv6 address
(``::ffff:192.0.2.1``, what a dual-stack socket reports for an IPv4 peer) is
that IPv4 address. Anything that is not an address (a test client's name, a
proxy's ``unknown``) is its own key, as written.

Pure: the console's sign-in failure windows and its room for password
checks, and the guarded look-ups of receiver tokens and API keys
(``receiver.http.client_address``), build their keys here, and the HTTP
server's share of connections per address (``receiver.server.addressshare``).
"""

from __future__ import annotations

import functools
import socket

__all__ = ["IPV6_PREFIX", "limit_key"]

IPV6_PREFIX = 56
_IPV4_MAPPED = bytes(10) + b"\xff\xff"  # ::ffff:a.b.c.d


def limit_key(address: str, prefix: int = IPV6_PREFIX) -> str:
    """``address`` as per-address limits count it: an IPv4 address itself, an IPv6 one's network of
    ``prefix`` bits (``2001:db8:0:100::/56``)."""
    if ":" not in address:
        return address
    return _ipv6_key(address, prefix)


# The receiver asks on every post, and a client posts from one address many times: a key is worked
# out once per address seen lately, not per request.
@functools.lru_cache(maxsize=4096)
def _ipv6_key(address: str, prefix: int) -> str:
    # socket's own conversions: a tenth of the time ipaddress takes, and the HTTP server asks on
    # every connection. The zone (``%eth0``) goes: one host's interfaces are one client.
    try:
        packed = socket.inet_pton(socket.AF_INET6, address.partition("%")[0])
    except OSError:
        return address
    if packed[:12] == _IPV4_MAPPED:
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    whole, bits = divmod(prefix, 8)
    network = packed[:whole]
    if bits:
        network += bytes([packed[whole] & (0xFF << (8 - bits)) & 0xFF])
    network += bytes(16 - len(network))
    return f"{socket.inet_ntop(socket.AF_INET6, network)}/{prefix}"
