"""Connections per client address: what an address is, the share, exempt proxies."""

from __future__ import annotations

import logging

import pytest

from receiver.server.addressshare import AddressShare, client_address


def test_a_client_address_is_the_ipv4_address_or_the_ipv6_slash_56() -> None:
    assert client_address(("203.0.113.7", 50000)) == "203.0.113.7"
    # One subscriber's network is one client: every address of its /56 (256 /64s) counts together.
    one = client_address(("2001:db8:1:2:aaaa::1", 50000, 0, 0))
    assert one == client_address(("2001:db8:1:ff:ffff::9", 1, 0, 0)) == "2001:db8:1::/56"
    assert client_address(("2001:db8:1:100::1", 1, 0, 0)) != one
    # Another prefix when the setting says so (SVCGW_IPV6_PREFIX).
    assert client_address(("2001:db8:1:2::1", 1, 0, 0), 64) == "2001:db8:1:2::/64"
    shares = AddressShare(1, ipv6_prefix=64)
    assert shares.counted_address(("2001:db8:1:3::1", 1, 0, 0)) == "2001:db8:1:3::/64"
    # A dual-stack socket's IPv4 peer counts as that IPv4 address.
    assert client_address(("::ffff:203.0.113.7", 1, 0, 0)) == "203.0.113.7"
    assert client_address("") is None and client_address(None) is None  # a Unix socket


def test_an_address_is_held_to_its_share_and_gets_room_back(caplog: pytest.LogCaptureFixture) -> None:
    shares = AddressShare(2)
    address = shares.counted_address(("198.51.100.1", 1))
    assert address == "198.51.100.1"
    with caplog.at_level(logging.WARNING, logger="svcgw"):
        assert shares.take(address) and shares.take(address)
        assert not shares.take(address) and not shares.take(address)
        assert shares.take("198.51.100.2")  # another address has its own share
        assert shares.held(address) == 2
        shares.release(address)
        assert shares.take(address) and not shares.take(address)
    # Told once each time the address reaches its share, not once per refused connection.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["client 198.51.100.1 holds 2 connections, its share of this server process; refusing more"] * 2
    for _ in range(2):
        shares.release(address)
    shares.release(address)  # one too many: nothing goes below zero
    assert shares.held(address) == 0
    with pytest.raises(ValueError):
        AddressShare(0)


def test_trusted_proxies_are_not_counted() -> None:
    shares = AddressShare(1, exempt=["10.0.0.0/8", "fd00::/8"])
    assert shares.counted_address(("10.1.2.3", 1)) is None
    assert shares.counted_address(("::ffff:10.1.2.3", 1, 0, 0)) is None
    assert shares.counted_address(("fd00::5", 1, 0, 0)) is None
    assert shares.counted_address(("11.0.0.1", 1)) == "11.0.0.1"
    everyone = AddressShare(1, exempt=["*"])
    assert everyone.counted_address(("11.0.0.1", 1)) is None
