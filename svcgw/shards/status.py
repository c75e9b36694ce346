"""What ``svcgw shards`` shows of each shard: instances, memory, queue depth and health.

Each shard is read on its own, at once and under a deadline: one shard down
shows as its error, never as the command's failure. On a Cluster a virtual
shard is read on the master that holds its tag's slot (its ``node``);
memory is that master's, shared by the virtual shards it holds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisClusterException, RedisError

from svcgw.config.shards import Shard
from svcgw.shards.clients import AsyncShardClients
from svcgw.shards.placement import instance_counts
from svcgw.storage.keys import KeySpace
from svcgw.storage.servers import on_shard_server, shard_node

__all__ = ["ShardStatus", "shard_statuses"]

Client = AsyncRedis | AsyncRedisCluster
# What reaching a shard may raise: Redis's errors, a Cluster's that are not RedisError, the socket's.
_UNREACHABLE = (RedisError, RedisClusterException, OSError, asyncio.TimeoutError)


@dataclass(frozen=True)
class ShardStatus:
    index: int
    name: str  # never a password (svcgw.shards.placement.Deployment.name)
    closed: bool
    weight: float
    instances: int | None  # None: shard 0, which counts them, did not answer
    node: str | None = None  # a Cluster's master holding the shard's slot
    used_memory: int | None = None
    used_memory_human: str | None = None
    queue_depth: int | None = None
    ping_ms: float | None = None
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return self.error is None

    def document(self) -> dict[str, Any]:
        return {**asdict(self), "healthy": self.healthy}


async def shard_statuses(clients: AsyncShardClients, queue_name: str, *, timeout: float = 5.0) -> list[ShardStatus]:
    """The status of every shard, in index order."""
    counts = await _counts(clients, timeout)
    return list(
        await asyncio.gather(
            *(
                _status(clients.of(shard), clients.keys_of(shard), shard, queue_name, counts, timeout)
                for shard in clients.shards
            )
        )
    )


async def _counts(clients: AsyncShardClients, timeout: float) -> dict[int, int] | None:
    try:
        async with asyncio.timeout(timeout):
            registry = clients.keys_of(clients.shards[0])
            stored = await clients.registry.hgetall(registry.shard_instances)
            total = await clients.registry.scard(registry.instances)
    except _UNREACHABLE:
        return None
    return instance_counts(_text(stored), int(total), clients.shards)


def _text(stored: dict[Any, Any]) -> dict[str, str]:
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    return {text(field): text(value) for field, value in stored.items()}


async def _status(
    client: Client, keys: KeySpace, shard: Shard, queue_name: str, counts: dict[int, int] | None, timeout: float
) -> ShardStatus:
    common: dict[str, Any] = {
        "index": shard.index,
        "name": shard.name,
        "closed": shard.closed,
        "weight": shard.weight,
        "instances": None if counts is None else counts.get(shard.index, 0),
    }
    try:
        async with asyncio.timeout(timeout):
            if isinstance(client, AsyncRedisCluster):
                common["node"] = (await shard_node(client, keys)).name
            started = time.perf_counter()
            await on_shard_server(client, keys, "PING")
            ping_ms = (time.perf_counter() - started) * 1000
            memory = await on_shard_server(client, keys, "INFO", "memory")
            depth = await client.llen(keys.rq.queue(queue_name))
    except _UNREACHABLE as exc:
        return ShardStatus(**common, error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return ShardStatus(
        **common,
        used_memory=int(memory.get("used_memory", 0)),
        used_memory_human=str(memory.get("used_memory_human", "")) or None,
        queue_depth=int(depth),
        ping_ms=round(ping_ms, 3),
    )
