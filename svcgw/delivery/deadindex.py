"""Where dead letters are: RQ's failed registry and the index by instance.

The source of truth is RQ's failed registry (``rq:failed:<queue>``): its
members are delivery ids scored by their expiry, and only a member whose
score is still in the future is a dead letter
(``svcgw.storage.rqformat.failed_live``). ``svcgw:dead:{<appid>}`` is an
index by instance for fast listing; it may still hold ids that were replayed
by ``rq requeue`` or that expired, so every id read from it is checked
against the registry (:func:`live_ids`). Read by :mod:`svcgw.delivery.deadletters`
and :mod:`svcgw.delivery.replay`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import cast

from redis.asyncio import Redis

from svcgw.config.settings import Settings
from svcgw.delivery.view import field_text
from svcgw.storage.keys import KeySpace
from svcgw.storage.rqformat import failed_live

__all__ = ["CHUNK", "candidates", "chunks", "is_dead", "live_ids", "newest", "text_or_none"]

CHUNK = 500


async def candidates(
    redis: Redis, keys: KeySpace, *, appid: str | None = None, account: str | None = None
) -> list[str]:
    """Ids from the per-instance index; not yet checked against the registry."""
    if appid is not None:
        if account is not None and text_or_none(await redis.hget(keys.instance(appid), "account")) != account:
            return []
        appids = [appid]
    else:
        assert account is not None
        appids = sorted(field_text(a) for a in await redis.smembers(keys.account_instances(account)))
    ids: list[str] = []
    for chunk in chunks(appids, CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for one in chunk:
                pipe.smembers(keys.dead_letters_by_appid(one))
            for members in await pipe.execute():
                ids.extend(field_text(m) for m in members)
    return ids


async def live_ids(redis: Redis, keys: KeySpace, settings: Settings, ids: Iterable[str]) -> list[str]:
    """The ids still in the failed registry, newest first."""
    failed = keys.rq.failed(settings.queue_name)
    now = time.time()
    scored: list[tuple[float, str]] = []
    for chunk in chunks(list(dict.fromkeys(ids)), CHUNK):
        for delivery_id, score in zip(chunk, await redis.zmscore(failed, chunk), strict=True):
            if score is not None and failed_live(score, now):
                scored.append((float(score), delivery_id))
    scored.sort(reverse=True)
    return [delivery_id for _, delivery_id in scored]


async def newest(redis: Redis, failed: str, *, start: int | None = None, num: int | None = None) -> list[str]:
    """Live members of the failed registry, newest first (a slice of them with start/num)."""
    # Scored above now: failed_live's members, read by score.
    members = cast(
        list[bytes | str], await redis.zrevrangebyscore(failed, "+inf", f"({time.time()}", start=start, num=num)
    )
    return [field_text(member) for member in members]


async def is_dead(redis: Redis, keys: KeySpace, settings: Settings, delivery_id: str) -> bool:
    score = await redis.zscore(keys.rq.failed(settings.queue_name), delivery_id)
    return score is not None and failed_live(score, time.time())


def chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def text_or_none(value: bytes | str | None) -> str | None:
    return None if value is None else field_text(value)
