"""One Redis client (one connection pool) per deployment, and each shard's way to it.

Built from the settings' layout (:func:`svcgw.shardspec.layout_of`): one
client per deployment, as :mod:`svcgw.connections` builds them, shared by the
shards that live there (a Cluster's virtual shards share its one client,
which sends each key to the master of its slot). Shard 0's client is also
the client of what belongs to the whole service. The asyncio clients open
their connections on first use, so a shard that is down costs nothing until
it is used, and then fails only what touches it (a blocking Cluster client
asks its seed nodes for the slots at once).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from .connections import async_deployment_client, sync_deployment_client
from .settings import Settings
from .shards import Shard
from .shardspec import ShardLayout, layout_of

__all__ = ["AsyncShardClients", "ShardClients"]

C = TypeVar("C")


class _ShardClients(Generic[C]):
    def __init__(self, layout: ShardLayout, clients: tuple[C, ...]) -> None:
        self.layout = layout
        self.clients = clients

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.layout.shards

    def of(self, shard: Shard) -> C:
        return self.clients[shard.deployment]

    @property
    def registry(self) -> C:
        """Shard 0's: accounts, the instance registry, the instance counts."""
        return self.clients[0]


class AsyncShardClients(_ShardClients[AsyncRedis | AsyncRedisCluster]):
    """asyncio clients of every shard: ``clients.of(shard)``; ``await clients.aclose()`` once done."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        layout = layout_of(settings)
        super().__init__(layout, tuple(
            async_deployment_client(settings, d, decode=decode, connect_timeout=connect_timeout)
            for d in layout.deployments
        ))  # fmt: skip

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class ShardClients(_ShardClients[Redis | RedisCluster]):
    """Blocking clients of every shard, for callers without an event loop."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        layout = layout_of(settings)
        super().__init__(layout, tuple(
            sync_deployment_client(settings, d, decode=decode, connect_timeout=connect_timeout)
            for d in layout.deployments
        ))  # fmt: skip

    def close(self) -> None:
        for client in self.clients:
            client.close()
