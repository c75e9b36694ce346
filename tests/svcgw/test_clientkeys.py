"""The key a client address is counted under: IPv4 alone, IPv6 by the prefix a subscriber holds (/56 by default)."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from svcgw.clientkeys import IPV6_PREFIX, limit_key


def test_an_ipv4_address_is_counted_alone() -> None:
    assert limit_key("192.0.2.7") == "192.0.2.7"
    assert limit_key("192.0.2.8") != limit_key("192.0.2.7")
    assert limit_key("192.0.2.7", 64) == "192.0.2.7"


def test_an_ipv6_address_is_counted_by_its_56_by_default() -> None:
    assert IPV6_PREFIX == 56
    one = limit_key("2001:db8:1:2::1")
    assert one == "2001:db8:1::/56"
    # The 256 /64s of one subscriber's /56 (2001:db8:1:0::/64 to 2001:db8:1:ff::/64) are one client.
    for same in ("2001:db8:1:ff:ffff:ffff:ffff:ffff", "2001:0db8:0001:0002:abcd::9", "2001:DB8:1:2::1%eth0"):
        assert limit_key(same) == one, same
    assert limit_key("2001:db8:1:100::1") != one
    assert limit_key("::1") == "::/56"


def test_the_prefix_is_a_setting_of_any_length() -> None:
    assert limit_key("2001:db8:1:2::1", 64) == "2001:db8:1:2::/64"
    assert limit_key("2001:db8:1:3::1", 64) != limit_key("2001:db8:1:2::1", 64)
    assert limit_key("2001:db8:1:2::1", 48) == limit_key("2001:db8:1:ff02::1", 48) == "2001:db8:1::/48"
    # Not on a byte boundary: a /60 holds 16 /64s.
    assert limit_key("2001:db8:1:2f::1", 60) == limit_key("2001:db8:1:20::1", 60) == "2001:db8:1:20::/60"
    assert limit_key("2001:db8:1:30::1", 60) != limit_key("2001:db8:1:2f::1", 60)
    assert limit_key("2001:db8::7", 128) == "2001:db8::7/128"


def test_one_address_asked_again_by_another_prefix_gets_that_prefix_s_key() -> None:
    # Keys are kept per address seen lately: kept by address and prefix, never one for the other.
    for _ in range(2):
        assert limit_key("2001:db8:1:2::1", 64) == "2001:db8:1:2::/64"
        assert limit_key("2001:db8:1:2::1", 48) == "2001:db8:1::/48"
        assert limit_key("2001:db8:1:2::1") == "2001:db8:1::/56"


def test_an_ipv4_mapped_address_is_the_ipv4_client() -> None:
    assert limit_key("::ffff:192.0.2.7") == "192.0.2.7"


def test_what_is_not_an_address_is_its_own_key() -> None:
    for text in ("testclient", "unknown", "", "2001:db8::1:", "192.0.2.300"):
        assert limit_key(text) == text


@given(st.integers(0, 2**128 - 1), st.integers(0, 2**128 - 1), st.integers(32, 128))
def test_every_address_of_a_network_has_one_key_and_others_another(address: int, other: int, prefix: int) -> None:
    host_bits = 128 - prefix
    ip = ipaddress.IPv6Address(address)
    neighbour = ipaddress.IPv6Address((address >> host_bits << host_bits) | (other & ((1 << host_bits) - 1)))
    stranger = ipaddress.IPv6Address(other)
    if any(a.ipv4_mapped is not None for a in (ip, neighbour, stranger)):
        return  # an IPv4 client, counted alone
    key = limit_key(str(ip), prefix)
    assert limit_key(str(neighbour), prefix) == key
    assert ipaddress.ip_network(key) == ipaddress.ip_network(f"{ip}/{prefix}", strict=False)
    assert (limit_key(str(stranger), prefix) == key) == (stranger in ipaddress.ip_network(key))
