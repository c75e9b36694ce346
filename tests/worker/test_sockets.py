"""Socket keys: every spelling of one socket gives the same keys, through the connect-time rules."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from worker.sockets import SocketKeys, address_key

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def _keys(resolver: SocketKeys, *urls: str) -> list[tuple[str, ...]]:
    async def go() -> list[tuple[str, ...]]:
        return [await resolver.keys(url) for url in urls]

    return asyncio.run(go())


def test_spellings_of_one_socket_share_their_keys() -> None:
    resolver = SocketKeys(LOOPBACK, resolve=lambda host, port: ["127.0.0.1"])
    spellings = ["http://127.0.0.1:9100/a", "http://127.0.0.1:09100/b", "http://127.1:9100", "http://2130706433:9100",
                 "http://LOCALHOST:9100/x", "http://any.wildcard.example:9100/y"]  # fmt: skip
    assert set(_keys(resolver, *spellings)) == {("127.0.0.1:9100",)}
    assert _keys(resolver, "http://127.0.0.1:9101")[0] == ("127.0.0.1:9101",)
    assert resolver.netlocs_of(["127.0.0.1:9100"]) >= {"127.0.0.1:09100", "localhost:9100"}


def test_refused_hosts_are_keyed_by_name_and_port() -> None:
    resolver = SocketKeys((), resolve=lambda host, port: ["10.0.0.1"])
    assert _keys(resolver, "http://Internal.Example:8080/")[0] == ("internal.example:8080",)


@pytest.mark.parametrize(("address", "key"), [("::ffff:127.0.0.1", "127.0.0.1:80"), ("::1", "[::1]:80")])
def test_address_keys_are_canonical(address: str, key: str) -> None:
    assert address_key(address, 80) == key
