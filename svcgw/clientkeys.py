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
checks (``receiver.console.account.client_address``) build their keys here.
"""

from __future__ import annotations

import ipaddress

__all__ = ["IPV6_PREFIX", "limit_key"]

IPV6_PREFIX = 64
_NETWORK = ((1 << IPV6_PREFIX) - 1) << (128 - IPV6_PREFIX)


def limit_key(address: str) -> str:
    """``address`` as per-address limits count it: an IPv4 address itself, an IPv6 one's /64 (``2001:db8::/64``)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        # The integer drops a zone (``%eth0``) too: one host's interfaces are one client.
        return f"{ipaddress.IPv6Address(int(ip) & _NETWORK)}/{IPV6_PREFIX}"
    return str(ip)
