"""Dead letters of every shard: listed, shown and replayed as if there were one.

A dead letter lives on its instance's shard (its delivery, its place in
RQ's failed registry, the index by instance), so the readers of
:mod:`svcgw.delivery.deadletters` run on each shard's client and their answers are
put together here: lists merged newest first, an id looked for on every
shard, replays summed. With an ``appid`` only its shard is read (the
registry's ``shard`` field, one ``HGET`` on shard 0). ``clients`` are
shards' clients and key names by shard index, shard 0's first; with one, every function
is exactly the one of :mod:`svcgw.delivery.deadletters`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from svcgw.config.settings import Settings
from svcgw.delivery import deadletters
from svcgw.delivery.deadletters import DeadLetter, DeadLetterDetail, ReplayResult
from svcgw.errors import NotFound
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import first_found, instance_shard

__all__ = ["count_dead", "list_dead", "replay", "show"]


async def list_dead(
    clients: Sequence[ShardRedis],
    settings: Settings,
    *,
    appid: str | None = None,
    account: str | None = None,
    destination: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[DeadLetter]:
    """Dead letters of every shard (of ``appid``'s alone when given), newest first; of one ``destination``
    (a ``dst_…`` id, or ``"primary"``) when given."""
    if appid is not None or len(clients) == 1:
        client, keys = await instance_shard(clients, appid) if appid is not None else clients[0]
        return await deadletters.list_dead(
            client, keys, settings, appid=appid, account=account, destination=destination, limit=limit, offset=offset
        )
    # Each shard's first ``offset + limit`` hold the merged page: a longer read, never a wrong one.
    pages = await asyncio.gather(
        *(
            deadletters.list_dead(c, k, settings, account=account, destination=destination, limit=offset + limit)
            for c, k in clients
        )
    )
    merged = sorted((letter for page in pages for letter in page), key=lambda d: d.dead_at or 0.0, reverse=True)
    return merged[offset : offset + limit]


async def show(
    clients: Sequence[ShardRedis], settings: Settings, delivery_id: str, *, account: str | None = None
) -> DeadLetterDetail:
    """The dead letter ``delivery_id`` from the shard that holds it; ``NotFound`` when none does."""
    return await first_found(
        clients, lambda shard: deadletters.show(*shard, settings, delivery_id, account=account), NotFound
    )


async def count_dead(
    clients: Sequence[ShardRedis],
    settings: Settings,
    *,
    appid: str | None = None,
    account: str | None = None,
    destination: str | None = None,
) -> int:
    """How many dead letters every shard holds (of ``appid``'s shard alone, or ``account``'s instances, and of
    ``destination``, when given)."""
    if appid is not None:
        client, keys = await instance_shard(clients, appid)
        return await deadletters.count_dead(
            client, keys, settings, appid=appid, account=account, destination=destination
        )
    counts = await asyncio.gather(
        *(deadletters.count_dead(c, k, settings, account=account, destination=destination) for c, k in clients)
    )
    return sum(counts)


async def replay(
    clients: Sequence[ShardRedis],
    settings: Settings,
    ids: Sequence[str] | None = None,
    appid: str | None = None,
    all: bool = False,
    account: str | None = None,
    since: float | None = None,
) -> list[ReplayResult]:
    """:func:`svcgw.delivery.deadletters.replay` on every shard; a named id is ``not_found`` only if no shard has it."""
    if appid is not None:
        client, keys = await instance_shard(clients, appid)
        return await deadletters.replay(client, keys, settings, appid=appid, account=account, since=since)
    answers = await asyncio.gather(
        *(deadletters.replay(c, k, settings, ids=ids, all=all, account=account, since=since) for c, k in clients)
    )
    if not ids:
        return [result for answer in answers for result in answer]
    found: dict[str, ReplayResult] = {}
    for answer in answers:
        for result in answer:
            if result.status != "not_found" or result.id not in found:
                found[result.id] = result
    return [found[delivery_id] for delivery_id in dict.fromkeys(ids)]
