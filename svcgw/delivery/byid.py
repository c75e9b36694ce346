"""Deliveries by id, with every attempt, wherever their ids were found.

:func:`show` reads one delivery (the console's delivery page, its API, ``svcgw deliveries show``,
and :mod:`svcgw.delivery.retrynow` after bringing its attempt forward); :func:`deliveries_of`
reads many in order (a further destination's index, :mod:`svcgw.delivery.bydestination`). Each
reads the delivery's record, or, a delivered delivery named by its post with no record left,
its post and its bare outcome (:mod:`svcgw.delivery.posts`). With an ``account``, a delivery of
another account is treated exactly like one that does not exist.

Errors: ``svcgw.errors.NotFound`` (``what`` "delivery"): no such delivery, or another account's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import attemptrecords
from svcgw.delivery.posts import FIELDS, ID_FIELDS, Item, Posts, complete
from svcgw.delivery.view import Delivery, build, field_float, field_text
from svcgw.errors import NotFound
from svcgw.intake.calllog import in_window
from svcgw.storage.keys import KeySpace

__all__ = ["deliveries_of", "show"]


async def deliveries_of(
    redis: Redis, keys: KeySpace, settings: Settings, ids: Sequence[str], *, account: str | None = None
) -> list[Delivery]:
    """The deliveries of ``ids`` (a further destination's index), in order, with their attempts: from their
    records, or, delivered ones named by their post, from the post and its bare outcome; those expired,
    and with ``account`` another account's, are left out."""
    if not ids:
        return []
    names = (*FIELDS, attemptrecords.COUNT)
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id in ids:
            pipe.hmget(keys.delivery(delivery_id), list(names))
        pipe.zmscore(keys.rq.scheduled(settings.queue_name), list(ids))
        replies = await pipe.execute()
    scores = replies[-1]
    records = [dict(zip(names, replies[position], strict=True)) for position in range(len(ids))]
    gone = [delivery_id for delivery_id, data in zip(ids, records, strict=True) if not data["appid"]]
    bare = await _delivered_of(redis, keys, settings, gone, account=account)
    found: list[Delivery] = []
    counts: dict[str, int] = {}
    for position, (delivery_id, data) in enumerate(zip(ids, records, strict=True)):
        if delivery_id in bare:
            found.append(bare[delivery_id])
            continue
        if account is not None and field_text(data["account"]) != account:
            continue
        delivery = build(delivery_id, data, scheduled_at=field_float(scores[position]))
        if delivery is not None:
            found.append(delivery)
            counts[delivery_id] = attemptrecords.count_of(data[attemptrecords.COUNT])
    recorded = [delivery for delivery in found if delivery.id in counts]
    vanished = await complete(redis, keys, recorded, counts, bodies_read=False)
    completed = {delivery.id: delivery for delivery in recorded}
    # Delivered between the two reads: what is kept of it now (svcgw.delivery.listing.list_deliveries says why).
    completed.update(await _delivered_of(redis, keys, settings, sorted(vanished), account=account))
    return [completed.get(delivery.id, delivery) for delivery in found]


async def _delivered_of(
    redis: Redis, keys: KeySpace, settings: Settings, ids: Sequence[str], *, account: str | None
) -> dict[str, Delivery]:
    """Of ``ids`` without a record, those named by their post and still in its log: delivered, from the post and
    its bare outcome, by id (one pipeline for the instances and posts, one outcome read per instance)."""
    named = [(delivery_id, parsed) for delivery_id in ids if (parsed := deliveryid.parse_named(delivery_id))]
    if not named:
        return {}
    appids = sorted({parsed[0] for _, parsed in named})
    async with redis.pipeline(transaction=False) as pipe:
        for appid in appids:
            pipe.hget(keys.instance(appid), "account")
        for _, (appid, entry_id, _) in named:
            pipe.xrange(keys.callback_log(appid), entry_id, entry_id)
        replies = await pipe.execute()
    owners = dict(zip(appids, replies[: len(appids)], strict=True))
    now = time.time()
    wanted: dict[str, list[Item]] = {}
    posts: dict[str, Posts] = {}
    for (delivery_id, (appid, entry_id, _)), rows in zip(named, replies[len(appids) :], strict=True):
        owner = field_text(owners[appid])
        if not owner or (account is not None and owner != account) or not rows:
            continue
        if not in_window(entry_id, now, settings.log_retention):
            continue  # its post is past the log's retention, as if trimmed
        book = posts.setdefault(appid, Posts(appid, owner, now, settings.log_retention))
        items = [item for item in book.items_of(entry_id, rows[0][1], None) if item.delivery_id == delivery_id]
        wanted.setdefault(appid, []).extend(items)
    found: dict[str, Delivery] = {}
    for appid, items in wanted.items():
        outcomes = await posts[appid].outcomes(redis, keys, [item.outcome_key for item in items])
        for item in items:
            found[item.delivery_id] = posts[appid].delivered(item, outcomes.get(item.outcome_key))
    return found


async def show(
    redis: Redis, keys: KeySpace, settings: Settings, delivery_id: str, *, account: str | None = None
) -> Delivery:
    """One delivery with every attempt; ``NotFound`` if it expired (or is another account's)."""
    if not delivery_id or len(delivery_id) > 200:
        raise NotFound("no such delivery", what="delivery")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.delivery(delivery_id))  # with its attempt records, fields a1 .. aN
        pipe.lrange(keys.delivery_attempts(delivery_id), 0, -1)  # records of earlier versions
        pipe.zscore(keys.rq.scheduled(settings.queue_name), delivery_id)
        whole, legacy, scheduled = await pipe.execute()
    stored = {field_text(name): value for name, value in whole.items()}
    named = deliveryid.parse_named(delivery_id)
    if not stored and named is not None:
        return await _show_delivered(redis, keys, settings, delivery_id, named[0], named[1], account=account)
    data = {name: stored.get(name) for name in (*FIELDS, *ID_FIELDS)}
    if account is not None and field_text(data["account"]) != account:
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    attempts = attemptrecords.from_hash(stored, legacy)
    delivery = build(delivery_id, data, attempts, scheduled_at=field_float(scheduled))
    if delivery is None:
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    return delivery


async def _show_delivered(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    delivery_id: str,
    appid: str,
    entry_id: str,
    *,
    account: str | None,
) -> Delivery:
    """A delivery named by its post with no record left: delivered, shown from its post and bare outcome."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.instance(appid), "account")
        pipe.xrange(keys.callback_log(appid), entry_id, entry_id)
        owner, rows = await pipe.execute()
    if not owner or (account is not None and field_text(owner) != account) or not rows:
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    now = time.time()
    if not in_window(entry_id, now, settings.log_retention):
        # Its post is past the log's retention, as if trimmed.
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    posts = Posts(appid, field_text(owner), now, settings.log_retention)
    # The post's own delivery, or one of its further destinations' (its field f names it).
    items = [item for item in posts.items_of(entry_id, rows[0][1], None) if item.delivery_id == delivery_id]
    if not items:
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    key = items[0].outcome_key
    return posts.delivered(items[0], (await posts.outcomes(redis, keys, [key])).get(key))
