"""One Redis client (one connection pool) per deployment, and each shard's way to it.

Built from the settings' layout (:func:`svcgw.shardspec.layout_of`): one
client per deployment, as :mod:`svcgw.connections` builds them, shared by the
shards that live there; on a Cluster, one client per virtual shard, which
puts the shard's hash tag on every key and sends it to the master of its
slot (svcgw.clusterspace). Shard 0's client is also
the client of what belongs to the whole service. The asyncio clients open
their connections on first use, so a shard that is down costs nothing until
it is used, and then fails only what touches it (a blocking Cluster client
asks its seed nodes for the slots at once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .connections import async_client, async_shard_client, sync_shard_client
from .settings import Settings
from .shards import Shard
from .shardspec import ShardLayout, layout_of

__all__ = ["AsyncShardClients", "ShardClients", "aclose_all", "role_clients"]

C = TypeVar("C")


class _ShardClients(Generic[C]):
    def __init__(self, layout: ShardLayout, clients: tuple[C, ...]) -> None:
        self.layout = layout
        self.clients = clients  # by shard index; shards of one deployment share one

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.layout.shards

    def of(self, shard: Shard) -> C:
        return self.clients[shard.index]

    @property
    def registry(self) -> C:
        """Shard 0's: accounts, the instance registry, the instance counts."""
        return self.clients[0]

    def distinct(self) -> list[C]:
        return list({id(client): client for client in self.clients}.values())


def _by_shard(layout: ShardLayout, build: Callable[[Shard], C]) -> tuple[C, ...]:
    """One client per deployment, shared by its shards; on a Cluster, one per shard (its tag's view)."""
    built: dict[int, C] = {}
    clients = []
    for shard in layout.shards:
        if shard.tag:
            clients.append(build(shard))
            continue
        if shard.deployment not in built:
            built[shard.deployment] = build(shard)
        clients.append(built[shard.deployment])
    return tuple(clients)


class AsyncShardClients(_ShardClients[AsyncRedis | AsyncRedisCluster]):
    """asyncio clients of every shard: ``clients.of(shard)``; ``await clients.aclose()`` once done."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        layout = layout_of(settings)
        super().__init__(layout, _by_shard(
            layout, lambda shard: async_shard_client(settings, shard, decode=decode, connect_timeout=connect_timeout)
        ))  # fmt: skip

    async def aclose(self) -> None:
        for client in self.distinct():
            await client.aclose()


class ShardClients(_ShardClients[Redis | RedisCluster]):
    """Blocking clients of every shard, for callers without an event loop."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        layout = layout_of(settings)
        super().__init__(layout, _by_shard(
            layout, lambda shard: sync_shard_client(settings, shard, decode=decode, connect_timeout=connect_timeout)
        ))  # fmt: skip

    def close(self) -> None:
        for client in self.distinct():
            client.close()


def role_clients(
    settings: Settings, *, decode: bool = False, connect_timeout: float | None = None
) -> tuple[AsyncRedis, ...]:
    """The asyncio client of each shard, by shard index, for serve and worker: shard 0's is :func:`async_client`'s.

    Shards of one deployment share its client; a Cluster's virtual shards each have the view of
    their hash tag (svcgw.clusterspace), typed as one Redis: they answer as one would.
    """
    layout = layout_of(settings)
    first = async_client(settings, decode=decode, connect_timeout=connect_timeout)

    def build(shard: Shard) -> AsyncRedis:
        if shard.index == 0:
            return first
        return async_shard_client(settings, shard, decode=decode, connect_timeout=connect_timeout)

    return _by_shard(layout, build)


async def aclose_all(clients: Sequence[AsyncRedis]) -> None:
    """Close each client once (shards of one deployment share theirs)."""
    for client in {id(client): client for client in clients}.values():
        await client.aclose()
