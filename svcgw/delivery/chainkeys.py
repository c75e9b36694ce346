"""The keys of an instance's service-event chain's members, for the scripts that touch them (chain.lua).

A script may touch only the keys it is given (docs/redis-layout.md, "Scripts and their KEYS"), and
advancing a chain touches the job and delivery hashes of the deliveries at its front, whose ids
only the chain list holds. So the caller reads the list first and names its members:

* a liveness flip (:func:`svcgw.liveness.transitions.go_offline`, ``go_online``) reads it under the WATCH of
  its transaction, so the chain it names is the chain ``queue_delivery.lua`` finds;
* the worker reads the chains of the service events it finishes just before the finish
  (``queue_finish.lua``), one pipeline per batch, none for a batch of customer events only. A
  service event queued in between may reach the chain's front unnamed: the finish says so and
  :func:`advance` runs ``chain_advance.lua`` with the members read anew.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis

from svcgw.storage.keys import KeySpace
from svcgw.storage.scripts import register

__all__ = ["ATTEMPTS", "advance", "member_keys", "members", "read"]

ATTEMPTS = 5  # each one is a chain that changed again between its read and its advance


def member_keys(keys: KeySpace, ids: Iterable[str]) -> list[str]:
    """Per member: its job hash, its delivery hash (chain.lua's chain_members)."""
    return [name for delivery_id in ids for name in (keys.rq.job(delivery_id), keys.delivery(delivery_id))]


def members(listed: Iterable[Any]) -> list[str]:
    """The ids of a chain as ``LRANGE`` answers them."""
    return [value.decode() if isinstance(value, bytes) else str(value) for value in listed]


async def read(redis: Redis, keys: KeySpace, chains: Sequence[str]) -> list[str]:
    """The members of every chain in ``chains`` (one round trip), each once."""
    if not chains:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for chain in chains:
            pipe.lrange(chain, 0, -1)
        listed = await pipe.execute()
    return list(dict.fromkeys(delivery_id for ids in listed for delivery_id in members(ids)))


async def advance(redis: Redis, keys: KeySpace, chain: str, queue_key: str, deferred_key: str, rq_now: str) -> bool:
    """Put the first unsettled member of ``chain`` in play; False if it kept changing meanwhile."""
    script = register(redis, "chain_advance")
    for _ in range(ATTEMPTS):
        ids = members(await redis.lrange(chain, 0, -1))
        named = [chain, queue_key, deferred_key, *member_keys(keys, ids)]
        if not int(await script(keys=named, args=[rq_now, *ids])):
            return True
    return False
