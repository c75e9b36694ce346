"""Commands about a shard's server (``PING``, ``INFO``, ``TIME``), sent to the server that holds its keys.

On one Redis that is the client's server. A Redis Cluster client would send them to a node of its
own choosing; a shard's is the master of its tag's slot, found through redis-py's public
``get_node_from_key``.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import RedisClusterException

from svcgw.storage.keys import KeySpace

__all__ = ["on_shard_server", "shard_node"]


async def on_shard_server(redis: AsyncRedis | AsyncRedisCluster, keys: KeySpace, *command: Any) -> Any:
    """A command about the server (``PING``, ``INFO``, ``TIME``) sent to the one that holds the shard's keys.

    A Cluster client would send it to a node of its own choosing; a shard's is the master of its
    tag's slot, found through redis-py's public ``get_node_from_key``.
    """
    client: Any = redis  # redis-py leaves execute_command untyped
    if isinstance(redis, AsyncRedisCluster):
        return await client.execute_command(*command, target_nodes=await shard_node(redis, keys))
    return await client.execute_command(*command)


async def shard_node(redis: AsyncRedisCluster, keys: KeySpace) -> AsyncClusterNode:
    """The Cluster's master of the shard's slot."""
    await redis.initialize()  # the slots' masters, known once initialized
    node = redis.get_node_from_key(keys.layout)
    if node is None:
        raise RedisClusterException(f"no master holds the slot of shard {keys.tag}")
    return node
