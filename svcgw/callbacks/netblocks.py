"""Which IP addresses are internal: the address rules' list of networks no callback may reach.

:func:`forbidden_reason` says why an address may not be dialled (loopback,
private, link-local, ...), or None for a public one. IPv4 addresses embedded
in IPv6 forms (mapped, 6to4, NAT64, Teredo, ...) are judged by the IPv4
address inside. Pure: no I/O. ``svcgw.callbacks.addresses`` applies it at
configuration and at connect time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from svcgw.config.environment import Network

__all__ = ["IPAddress", "forbidden_reason"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4_RULES: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(net), reason)
    for net, reason in (
        ("0.0.0.0/32", "unspecified"),
        ("0.0.0.0/8", "this-network"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "CGNAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),  # IETF protocol assignments
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"),  # deprecated 6to4 relay anycast
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
    )
)

_V6_RULES: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), reason)
    for net, reason in (
        ("100::/64", "discard-only"),
        ("2001:2::/48", "benchmarking"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "reserved"),  # IETF protocol assignments, ORCHID
        ("3fff::/20", "documentation"),
        ("5f00::/16", "reserved"),  # SRv6 SIDs
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_V4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_TEREDO = ipaddress.IPv6Network("2001::/32")

# Embedded forms whose address is only as good as the IPv4 address inside it.
# The flag says whether the form itself reaches the public Internet when the
# IPv4 address is public.
_EMBEDDINGS: tuple[tuple[ipaddress.IPv6Network, str, bool], ...] = (
    (_V4_MAPPED, "IPv4-mapped", True),
    (_V4_TRANSLATED, "IPv4-translated", False),
    (_V4_COMPATIBLE, "IPv4-compatible", False),
    (_SIX_TO_FOUR, "6to4", True),
    (_NAT64, "NAT64", True),
    (_TEREDO, "Teredo", False),
)


def _embedded_v4(ip: ipaddress.IPv6Address, form: ipaddress.IPv6Network) -> ipaddress.IPv4Address:
    if form is _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    if form is _TEREDO:
        # The client's address, stored inverted; it is where the traffic ends up.
        return ipaddress.IPv4Address(~int(ip) & 0xFFFFFFFF)
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _allowed(ip: IPAddress, allow: Iterable[Network]) -> bool:
    return any(ip.version == net.version and ip in net for net in allow)


def _v4_reason(ip: ipaddress.IPv4Address) -> str | None:
    for net, reason in _V4_RULES:
        if ip in net:
            return reason
    return None


def forbidden_reason(ip: IPAddress, allow: Sequence[Network] = ()) -> str | None:
    """Why ``ip`` may not be dialled, or None when it is a public address.

    The reason is a short category: ``loopback``, ``private``, ``link-local``,
    ``CGNAT``, ``multicast``, ``broadcast``, ``reserved``, ``unspecified``,
    ``documentation``, ``benchmarking``, ``unique-local``, ``site-local``, ...
    For an IPv4 address embedded in an IPv6 one (IPv4-mapped, -compatible,
    -translated, 6to4, NAT64, Teredo) the form is added:
    ``"loopback (IPv4-mapped)"``. Embedded forms that do not reach the public
    Internet by themselves are ``reserved`` even around a public IPv4 address.
    The NAT64 local-use prefix 64:ff9b:1::/48 is refused outright: where its
    IPv4 address sits depends on the local translator's prefix length.

    An address inside any ``allow`` network is permitted; for an embedded form
    the IPv4 address inside it is checked against ``allow`` as well.
    """
    if _allowed(ip, allow):
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_reason(ip)

    if ip == ipaddress.IPv6Address(0):
        return "unspecified"
    if ip == ipaddress.IPv6Address(1):
        return "loopback"
    for form, name, reaches_public in _EMBEDDINGS:
        if ip in form:
            inner = _embedded_v4(ip, form)
            if _allowed(inner, allow):
                return None
            reason = _v4_reason(inner)
            if reason is not None:
                return f"{reason} ({name})"
            return None if reaches_public else f"reserved ({name})"
    if ip in _NAT64_LOCAL:
        return "reserved (NAT64 local-use)"
    for net, reason in _V6_RULES:
        if ip in net:
            return reason
    if ip not in _GLOBAL_UNICAST:
        return "reserved"
    return None
