"""svcgw.shards.packing: hiredis packs what redis-py's asyncio packer packs, and the pools' connections use it."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import DataError

from svcgw.shards.packing import packing
from svcgw.shards.pools import WaitingPool, WaitingSentinelPool

PACKED = packing(Connection)


@pytest.mark.parametrize(
    "args",
    [
        ("SET", "key", "value"),
        (b"EVALSHA", "0" * 40, 2, b"k1", "k2", "ünïcode", 1.5, 0, -7, 1e20, 0.1, 12345678901234567890, b""),
        ("CONFIG GET", "maxmemory"),  # two words in one argument: redis-py splits them
        (b"CONFIG GET", b"maxmemory"),
        ("SET", "key", memoryview(b"view")),
        ("SET", "key", bytearray(b"array")),
        ("HSET", "h", *[f"f{n}" for n in range(2000)]),  # over redis-py's buffer cutoff
    ],
)
def test_packs_the_bytes_redis_py_packs(args: tuple[object, ...]) -> None:
    assert b"".join(PACKED().pack_command(*args)) == b"".join(Connection().pack_command(*args))


@pytest.mark.parametrize("value", [None, True, object()])
def test_refuses_what_redis_py_refuses(value: object) -> None:
    with pytest.raises(DataError):
        PACKED().pack_command("SET", "key", value)


def test_one_class_per_original_and_not_twice() -> None:
    assert packing(Connection) is PACKED
    assert packing(PACKED) is PACKED
    assert issubclass(PACKED, Connection)


def test_the_waiting_pools_connections_pack_with_hiredis() -> None:
    assert WaitingPool.from_url("redis://127.0.0.1:6379/0").connection_class is PACKED
    unix = WaitingPool.from_url("unix:///tmp/redis.sock").connection_class
    assert unix is packing(UnixDomainSocketConnection) and issubclass(unix, UnixDomainSocketConnection)
    sentinel = WaitingSentinelPool("primary", object()).connection_class
    assert sentinel is packing(SentinelManagedConnection)
