"""Stranded deliveries: claimed and leased by a worker that never ends their attempt, handed back.

A worker extends the lease of every delivery it holds until the attempt's outcome is stored
(:mod:`worker.engine`). Were an attempt never to end (its task waiting on something that never
comes), its lease would be extended for as long as the worker runs, and the delivery would
neither be attempted nor handed back to another worker: ``deliveries list`` says "pending, now",
nothing fails, nothing is dead. The engine therefore looks at how long it has held each claim:
one held past :func:`ceiling` is stranded, and the engine hands it back to the front of the queue
without an attempt (the attempt may have been sent: delivery is at least once, under the same
delivery id).

What this module keeps, per shard, is the record of those hand-backs until they are resolved:

* the hash ``KeySpace.stranded``: delivery id -> the ``attempts`` its delivery had when it was
  handed back. It is resolved once an attempt of it is recorded after that (``attempts`` above
  the value) or the delivery is finished (its job hash gone: delivered, or its data expired);
  every engine resolves its shard's at :data:`RESOLVE_EVERY`. While it holds an entry,
  ``/readyz`` is degraded and names the shard (:func:`unresolved`);
* the counter ``deliveries_stranded`` of ``/metrics`` (``svcgw_deliveries_stranded_total``), one
  per delivery handed back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, cast

from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.counters import STRANDED
from svcgw.storage.keys import KeySpace

__all__ = ["RECORD_SECONDS", "RESOLVE_EVERY", "SLACK", "ceiling", "overdue", "record", "resolve", "unresolved"]

# Seconds between two looks of an engine at its shard's record of stranded deliveries.
RESOLVE_EVERY = 5.0
# The record's own expiry, renewed by each hand-back: a net under the resolution, should no
# worker run on the shard any more.
RECORD_SECONDS = 86400
# Beyond the longest an attempt may take, the time for the engine's loop to come round.
SLACK = 2.0


def ceiling(settings: Settings, line_wait: float) -> float:
    """The longest a worker holds a claim whose attempt is under way: its lease, the time an attempt may wait
    for a slot of its destination (``line_wait``) and then for the destination's answer, and some slack."""
    return settings.lease_seconds + line_wait + settings.delivery_timeout + SLACK


def overdue(held_since: Mapping[str, float], now: float, longest: float, exempt: Collection[str] = ()) -> list[str]:
    """The held claims (delivery id -> when claimed) older than ``longest`` seconds at ``now``, but ``exempt``."""
    return [delivery_id for delivery_id, since in held_since.items()
            if now - since > longest and delivery_id not in exempt]  # fmt: skip


async def record(redis: AsyncRedis, keys: KeySpace, handed_back: Mapping[str, int]) -> None:
    """Note the deliveries handed back (id -> their ``attempts`` then) until resolved, and count them."""
    if not handed_back:
        return
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hset(keys.stranded, mapping=cast(Mapping[Any, Any], handed_back))
        pipe.expire(keys.stranded, RECORD_SECONDS)
        pipe.hincrby(keys.metrics_counters, STRANDED, len(handed_back))
        await pipe.execute()


async def resolve(redis: AsyncRedis, keys: KeySpace) -> int:
    """Forget the shard's stranded deliveries attempted or finished since; how many are left."""
    noted = cast(dict[Any, Any], await redis.hgetall(keys.stranded))
    if not noted:
        return 0
    ids = [_text(delivery_id) for delivery_id in noted]
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id in ids:
            pipe.exists(keys.rq.job(delivery_id))
            pipe.hget(keys.delivery(delivery_id), "attempts")
        found = await pipe.execute()
    done = []
    for n, delivery_id in enumerate(ids):
        exists, attempts = found[2 * n], found[2 * n + 1]
        if not exists or int(attempts or 0) > int(noted[_key(noted, delivery_id)]):
            done.append(delivery_id)
    if done:
        await redis.hdel(keys.stranded, *done)
    return len(ids) - len(done)


async def unresolved(redis: AsyncRedis, keys: KeySpace) -> int:
    """How many deliveries of the shard were handed back stranded and not attempted since."""
    return int(await redis.hlen(keys.stranded))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _key(noted: Mapping[Any, Any], delivery_id: str) -> Any:
    """The hash's field as the client returned it (bytes or text)."""
    return delivery_id if delivery_id in noted else delivery_id.encode()
