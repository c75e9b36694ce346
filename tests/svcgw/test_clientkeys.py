"""The key a client address is counted under: IPv4 alone, IPv6 by its /64."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from svcgw.clientkeys import limit_key


def test_an_ipv4_address_is_counted_alone() -> None:
    assert limit_key("192.0.2.7") == "192.0.2.7"
    assert limit_key("192.0.2.8") != limit_key("192.0.2.7")


def test_an_ipv6_address_is_counted_by_its_64() -> None:
    one = limit_key("2001:db8:1:2::1")
    assert one == "2001:db8:1:2::/64"
    for same in ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:0db8:0001:0002:abcd::9", "2001:DB8:1:2::1%eth0"):
        assert limit_key(same) == one, same
    assert limit_key("2001:db8:1:3::1") != one
    assert limit_key("::1") == "::/64"


def test_an_ipv4_mapped_address_is_the_ipv4_client() -> None:
    assert limit_key("::ffff:192.0.2.7") == "192.0.2.7"


def test_what_is_not_an_address_is_its_own_key() -> None:
    for text in ("testclient", "unknown", "", "2001:db8::1:", "192.0.2.300"):
        assert limit_key(text) == text


@given(st.integers(0, 2**128 - 1), st.integers(0, 2**64 - 1))
def test_every_address_of_a_64_has_one_key(address: int, host: int) -> None:
    ip = ipaddress.IPv6Address(address)
    neighbour = ipaddress.IPv6Address((address >> 64 << 64) | host)
    if ip.ipv4_mapped is not None or neighbour.ipv4_mapped is not None:
        return  # an IPv4 client, counted alone
    assert limit_key(str(ip)) == limit_key(str(neighbour))
    assert ipaddress.ip_network(limit_key(str(ip))).prefixlen == 64
