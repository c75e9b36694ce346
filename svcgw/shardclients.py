"""One Redis client (one connection pool) per deployment, and each shard's way to it.

Built from the settings' layout (:func:`svcgw.shardspec.layout_of`): one
client per deployment, as :mod:`svcgw.connections` builds them, shared by the
shards that live there (a Cluster's virtual shards share its one client,
which sends each key to the master of its slot). Shard 0's client is also
the client of what belongs to the whole service. Clients open their
connections on first use, so a shard that is down costs nothing until it is
used, and then fails only what touches it.
"""

from __future__ import annotations

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .connections import async_deployment_client, sync_deployment_client
from .settings import Settings
from .shards import Shard
from .shardspec import ShardLayout, layout_of

__all__ = ["AsyncShardClients", "ShardClients"]


class AsyncShardClients:
    """asyncio clients of every shard: ``clients.of(shard)``; ``await clients.aclose()`` once done."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        self.layout: ShardLayout = layout_of(settings)
        self.clients: tuple[AsyncRedis | AsyncRedisCluster, ...] = tuple(
            async_deployment_client(settings, d, decode=decode, connect_timeout=connect_timeout)
            for d in self.layout.deployments
        )

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.layout.shards

    def of(self, shard: Shard) -> AsyncRedis | AsyncRedisCluster:
        return self.clients[shard.deployment]

    @property
    def registry(self) -> AsyncRedis | AsyncRedisCluster:
        """Shard 0's: accounts, the instance registry, the instance counts."""
        return self.clients[0]

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class ShardClients:
    """Blocking clients of every shard, for callers without an event loop."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        self.layout: ShardLayout = layout_of(settings)
        self.clients: tuple[Redis | RedisCluster, ...] = tuple(
            sync_deployment_client(settings, d, decode=decode, connect_timeout=connect_timeout)
            for d in self.layout.deployments
        )

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.layout.shards

    def of(self, shard: Shard) -> Redis | RedisCluster:
        return self.clients[shard.deployment]

    @property
    def registry(self) -> Redis | RedisCluster:
        return self.clients[0]

    def close(self) -> None:
        for client in self.clients:
            client.close()
