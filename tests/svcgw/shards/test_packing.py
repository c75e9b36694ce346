"""svcgw.shards.packing: hiredis packs what redis-py's asyncio packer packs, and the pools' connections use it;
redis-py still packs every command through ``pack_command`` and still offers its asyncio connections no packer."""

from __future__ import annotations

import asyncio
import inspect

import hiredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection
from redis.connection import AbstractConnection as BlockingConnection
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


@pytest.mark.parametrize(
    "original",
    [Connection, SSLConnection, UnixDomainSocketConnection, SentinelManagedConnection, SentinelManagedSSLConnection],
)
def test_each_connection_class_redis_py_s_pools_pick_has_its_packing_kind(original: type[AbstractConnection]) -> None:
    packed = packing(original)
    assert packed is not original and issubclass(packed, original)
    assert packed.pack_command is PACKED.pack_command
    assert packing(packed) is packed


def test_a_connection_class_of_anyone_else_s_keeps_redis_py_s_packer() -> None:
    class Other(Connection):
        pass

    assert packing(Other) is Other


def test_the_waiting_pools_connections_pack_with_hiredis() -> None:
    assert WaitingPool.from_url("redis://127.0.0.1:6379/0").connection_class is PACKED
    assert WaitingPool.from_url("rediss://127.0.0.1:6379/0").connection_class is packing(SSLConnection)
    unix = WaitingPool.from_url("unix:///tmp/redis.sock").connection_class
    assert unix is packing(UnixDomainSocketConnection) and issubclass(unix, UnixDomainSocketConnection)
    sentinel = WaitingSentinelPool("primary", object()).connection_class
    assert sentinel is packing(SentinelManagedConnection)
    assert WaitingSentinelPool("primary", object(), ssl=True).connection_class is packing(SentinelManagedSSLConnection)


# What the packing relies on in redis-py (redis 8.1), pinned: an upgrade that changes it fails here.


def test_redis_py_packs_every_command_a_client_sends_through_pack_command(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    packed: list[tuple[object, ...]] = []
    real = hiredis.pack_command

    def counting(args: tuple[object, ...]) -> bytes:
        packed.append(args)
        made: bytes = real(args)
        return made

    monkeypatch.setattr(hiredis, "pack_command", counting)

    async def main() -> list[object]:
        redis = Redis.from_pool(WaitingPool.from_url(redis_url))
        answers: list[object] = [await redis.set("svcgw-test:k", "v")]
        answers.append(await redis.eval("return #KEYS", 2, "svcgw-test:a", "svcgw-test:b"))
        async with redis.pipeline(transaction=True) as pipe:
            pipe.incr("svcgw-test:n")
            pipe.get("svcgw-test:k")
            answers.extend(await pipe.execute())
        await redis.aclose()
        return answers

    assert asyncio.run(main()) == [True, 2, 1, b"v"]
    sent = {args[0] for args in packed}
    assert {"SET", "EVAL", "MULTI", "INCRBY", "GET", "EXEC"} <= sent, sent


def test_redis_py_s_asyncio_connections_still_take_no_command_packer() -> None:
    """The blocking connections take one; were the asyncio ones to, it would replace the override of pack_command."""
    assert "command_packer" not in inspect.signature(AbstractConnection.__init__).parameters
    assert "command_packer" in inspect.signature(BlockingConnection.__init__).parameters


def test_a_cluster_clients_nodes_and_the_nodes_it_learns_later_pack_by_hiredis() -> None:
    from redis.asyncio.cluster import ClusterNode

    from svcgw.shards.connections import AsyncCluster

    client = AsyncCluster(startup_nodes=[ClusterNode("127.0.0.1", 7000), ClusterNode("127.0.0.1", 7001)])
    assert client.get_connection_kwargs()["connection_class"] is PACKED
    assert [node.connection_class for node in client.startup_nodes] == [PACKED, PACKED]
    # A node learnt later (a replica promoted, a master added) is made from the same keyword arguments.
    learnt = ClusterNode("127.0.0.1", 7002, **client.get_connection_kwargs())
    assert learnt.connection_class is PACKED
    assert "connection_class" in inspect.signature(ClusterNode).parameters
