"""One Redis client (one connection pool) per deployment, and each shard's way to it: :class:`ShardRedis`.

Built from the settings' layout (``Settings.shard_layout``): one
client per deployment, as :mod:`svcgw.shards.connections` builds them, shared by the
shards that live there. A Redis Cluster is one deployment with one stock
Cluster client, which sends each command to the master of its keys' slot;
its virtual shards differ by their key names (:class:`svcgw.storage.keys.KeySpace`),
each carrying the shard's tag. A shard is reached through the pair of the
two, :class:`ShardRedis`. Shard 0's is also the way to what belongs to the
whole service. The asyncio clients open their connections on first use, so a
shard that is down costs nothing until it is used, and then fails only what
touches it (a blocking Cluster client asks its seed nodes for the slots at once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from svcgw.config.settings import Settings
from svcgw.config.shards import Shard, ShardLayout
from svcgw.shards.connections import async_shard_client, sync_shard_client
from svcgw.storage.keys import KeySpace

__all__ = ["AsyncShardClients", "ShardClients", "ShardRedis", "aclose_all", "role_clients", "spaces"]

C = TypeVar("C")


class ShardRedis(NamedTuple):
    """A shard's asyncio client and its key names: ``redis, keys = shard``.

    On a Cluster, the client is the Cluster's (every shard's the same one) and the names carry
    the shard's tag; elsewhere the client is its deployment's and the names are plain.
    """

    redis: AsyncRedis
    keys: KeySpace


def spaces(layout: ShardLayout) -> tuple[KeySpace, ...]:
    """Each shard's key names, by shard index."""
    return tuple(KeySpace(shard.tag) for shard in layout.shards)


class _ShardClients(Generic[C]):
    def __init__(self, layout: ShardLayout, clients: tuple[C, ...]) -> None:
        self.layout = layout
        self.clients = clients  # by shard index; shards of one deployment share one
        self.spaces = spaces(layout)

    @property
    def shards(self) -> tuple[Shard, ...]:
        return self.layout.shards

    def of(self, shard: Shard) -> C:
        return self.clients[shard.index]

    def keys_of(self, shard: Shard) -> KeySpace:
        return self.spaces[shard.index]

    @property
    def registry(self) -> C:
        """Shard 0's: accounts, the instance registry, the instance counts."""
        return self.clients[0]

    def distinct(self) -> list[C]:
        return list({id(client): client for client in self.clients}.values())


def _by_shard(layout: ShardLayout, build: Callable[[Shard], C]) -> tuple[C, ...]:
    """One client per deployment, shared by its shards (a Cluster's virtual shards share the Cluster's)."""
    built: dict[int, C] = {}
    for shard in layout.shards:
        if shard.deployment not in built:
            built[shard.deployment] = build(shard)
    return tuple(built[shard.deployment] for shard in layout.shards)


class AsyncShardClients(_ShardClients[AsyncRedis | AsyncRedisCluster]):
    """asyncio clients of every shard: ``clients.of(shard)``; ``await clients.aclose()`` once done."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        layout = settings.shard_layout
        super().__init__(layout, _by_shard(
            layout, lambda shard: async_shard_client(settings, shard, decode=decode, connect_timeout=connect_timeout)
        ))  # fmt: skip

    async def aclose(self) -> None:
        for client in self.distinct():
            await client.aclose()


class ShardClients(_ShardClients[Redis | RedisCluster]):
    """Blocking clients of every shard, for callers without an event loop."""

    def __init__(self, settings: Settings, *, decode: bool = False, connect_timeout: float | None = None) -> None:
        layout = settings.shard_layout
        super().__init__(layout, _by_shard(
            layout, lambda shard: sync_shard_client(settings, shard, decode=decode, connect_timeout=connect_timeout)
        ))  # fmt: skip

    def close(self) -> None:
        for client in self.distinct():
            client.close()


def role_clients(
    settings: Settings, *, decode: bool = False, connect_timeout: float | None = None
) -> tuple[ShardRedis, ...]:
    """Each shard's asyncio client and key names, by shard index, for serve, worker and the CLI.

    Shards of one deployment share its client, a Cluster's virtual shards the Cluster's: typed
    as one Redis, since the stock Cluster client answers every command the roles send as one
    Redis does.
    """
    layout = settings.shard_layout
    clients: tuple[Any, ...] = _by_shard(
        layout, lambda shard: async_shard_client(settings, shard, decode=decode, connect_timeout=connect_timeout)
    )
    return tuple(ShardRedis(client, keys) for client, keys in zip(clients, spaces(layout), strict=True))


async def aclose_all(clients: Sequence[ShardRedis] | Sequence[AsyncRedis]) -> None:
    """Close each client once (shards of one deployment share theirs)."""
    redis = [client.redis if isinstance(client, ShardRedis) else client for client in clients]
    for client in {id(client): client for client in redis}.values():
        await client.aclose()
