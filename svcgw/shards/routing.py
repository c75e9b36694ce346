"""Reading an instance's data on its shard: which client, and a read by id over every shard.

An instance's data (log, deliveries, dead letters, liveness) lives on its
shard; the registry on shard 0 names that shard in the instance's hash
(``shard``; none: shard 0, as for every instance registered before shards).
A reader with the instance's hash in hand picks the client with
:func:`shard_client`, for free; one without it pays one ``HGET`` on shard 0
(:func:`instance_shard`). A delivery id does not name its shard, so a read
by id tries each shard in turn (:func:`first_found`): the shards are few.

``clients`` are the shards' :class:`svcgw.shards.clients.ShardRedis` (an asyncio client and the
shard's key names) by shard index, shard 0's first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from svcgw.shards.clients import ShardRedis

__all__ = ["first_found", "instance_shard", "shard_client"]

T = TypeVar("T")


def shard_client(clients: Sequence[ShardRedis], field: bytes | str | None) -> ShardRedis:
    """The client of the shard the registry's ``shard`` field names (shard 0's without one, or for a bad one)."""
    text = field.decode("ascii", "replace") if isinstance(field, bytes) else field
    index = int(text) if text and text.isascii() and text.isdigit() else 0
    return clients[index] if index < len(clients) else clients[0]


async def instance_shard(clients: Sequence[ShardRedis], appid: str) -> ShardRedis:
    """The client of ``appid``'s shard: one ``HGET`` on shard 0, none with one shard."""
    if len(clients) == 1:
        return clients[0]
    registry = clients[0]
    return shard_client(clients, await registry.redis.hget(registry.keys.instance(appid), "shard"))


async def first_found(
    clients: Sequence[ShardRedis], read: Callable[[ShardRedis], Awaitable[T]], missing: type[Exception]
) -> T:
    """``read`` on each shard in turn until one does not raise ``missing``; the last one's ``missing`` else."""
    for client in clients[:-1]:
        try:
            return await read(client)
        except missing:
            continue
    return await read(clients[-1])
