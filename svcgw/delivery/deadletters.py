"""Dead letters: deliveries whose retries ran out, listed, counted, shown and replayed, on every shard as on one.

Where they are, and how an id is known to be one still, is
:mod:`svcgw.delivery.deadindex`: RQ's failed registry, and an index by instance;
a replay's one fresh attempt is :mod:`svcgw.delivery.replay`.

A dead letter lives on its instance's shard (its delivery, its place in
RQ's failed registry, the index by instance), so each function takes the
shards' clients and key names (``clients``, by shard index, shard 0's first;
one for a single shard): each shard is read, and the answers put together
(lists merged newest first, an id looked for on every shard, counts and
replays summed). With an ``appid`` only its shard is read (the registry's
``shard`` field, one ``HGET`` on shard 0, none with one shard).

A dead letter names its ``destination``: the further destination (``dst_…``)
its delivery went to, or None for the primary address's; the lists can be
narrowed to one (``destination``, or ``"primary"`` for the primary's alone).

Every function takes an optional ``account``: with it, a dead letter of
another account is treated exactly like one that does not exist, so the
answer tells nothing about other accounts (the console relies on this).

The functions are coroutines; they accept a ``redis.asyncio`` client in either
decoding mode.

A dead letter that is not there (or is another account's) raises
``svcgw.errors.NotFound`` with ``what="dead letter"``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import attemptrecords
from svcgw.delivery import replay as replaying
from svcgw.delivery.deadindex import CHUNK, candidates, chunks, is_dead, live_ids, newest
from svcgw.delivery.replay import ReplayResult
from svcgw.delivery.view import field_float, field_text
from svcgw.errors import NotFound
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import first_found, instance_shard
from svcgw.storage.keys import KeySpace

__all__ = [
    "DeadLetter",
    "DeadLetterDetail",
    "ReplayResult",
    "count_dead",
    "list_dead",
    "replay",
    "show",
]

_FIELDS = ("appid", "account", "event_type", "attempts", "dead_at", "received_at", "state", "destination")
# The destination filter's value for the primary address's dead letters alone (as svcgw.delivery.listing's).
PRIMARY = "primary"


@dataclass(frozen=True)
class DeadLetter:
    id: str
    appid: str
    account: str
    event_type: str
    attempts: int
    last_error: str | None
    dead_at: float | None
    received_at: float | None
    destination: str | None = None  # the further destination (dst_…); None for the primary address's

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class DeadLetterDetail:
    """A dead letter with its body (as text) and every attempt record, oldest first."""

    id: str
    appid: str
    account: str
    event_type: str
    last_error: str | None
    dead_at: float | None
    received_at: float | None
    body: str = field(repr=False)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    destination: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


# --- reading one shard ---------------------------------------------------------
async def _list_on(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    *,
    appid: str | None = None,
    account: str | None = None,
    destination: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[DeadLetter]:
    """Dead letters, newest first, optionally of one instance and/or one account, and/or one destination."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset cannot be negative")
    if limit == 0:
        return []
    failed = keys.rq.failed(settings.queue_name)
    if destination is not None:
        # Which destination is in each delivery's hash: every candidate is read (an account's dead letters
        # are few; without an appid or account, those of the whole registry are).
        every = await _scoped(redis, keys, settings, appid, account)
        live = await _of_destination(redis, keys, every, destination)
        return [
            letter
            for letter in await _load(redis, keys, live[offset : offset + limit])
            if (account is None or letter.account == account) and (appid is None or letter.appid == appid)
        ]
    if appid is None and account is None:
        # The registry itself is ordered by expiry, i.e. by the time each died.
        letters: list[DeadLetter] = []
        start = offset
        while len(letters) < limit:
            want = limit - len(letters)
            ids = await newest(redis, failed, start=start, num=want)
            if not ids:
                break
            start += len(ids)
            letters.extend(await _load(redis, keys, ids))
        return letters
    live = await live_ids(redis, keys, settings, await candidates(redis, keys, appid=appid, account=account))
    page = live[offset : offset + limit]
    return [
        letter
        for letter in await _load(redis, keys, page)
        if (account is None or letter.account == account) and (appid is None or letter.appid == appid)
    ]


async def _count_on(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    *,
    appid: str | None = None,
    account: str | None = None,
    destination: str | None = None,
) -> int:
    """How many dead letters there are (of one instance and/or one account, and/or one destination)."""
    if destination is not None:
        every = await _scoped(redis, keys, settings, appid, account)
        return len(await _of_destination(redis, keys, every, destination))
    if appid is None and account is None:
        return int(await redis.zcount(keys.rq.failed(settings.queue_name), f"({time.time()}", "+inf"))
    return len(await live_ids(redis, keys, settings, await candidates(redis, keys, appid=appid, account=account)))


async def _show_on(
    redis: Redis, keys: KeySpace, settings: Settings, delivery_id: str, *, account: str | None = None
) -> DeadLetterDetail:
    """One dead letter with its body and attempts; ``NotFound`` if it is not dead (or not the account's)."""
    if not await is_dead(redis, keys, settings, delivery_id):
        raise NotFound(f"no dead letter {delivery_id!r}", what="dead letter")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.delivery(delivery_id))  # with its attempt records, fields a1 .. aN
        pipe.lrange(keys.delivery_attempts(delivery_id), 0, -1)  # records of earlier versions
        whole, legacy = await pipe.execute()
    stored = {field_text(name): value for name, value in whole.items()}
    data = {name: stored.get(name) for name in (*_FIELDS, "body")}
    if not data["appid"] or (account is not None and field_text(data["account"]) != account):
        raise NotFound(f"no dead letter {delivery_id!r}", what="dead letter")
    attempts = [_attempt(record) for record in attemptrecords.from_hash(stored, legacy)]
    body = data["body"]
    return DeadLetterDetail(
        id=delivery_id,
        appid=field_text(data["appid"]),
        account=field_text(data["account"]),
        event_type=field_text(data["event_type"]),
        last_error=_last_error(attempts[-1]) if attempts else None,
        dead_at=field_float(data["dead_at"]),
        received_at=field_float(data["received_at"]) or deliveryid.received_at(delivery_id),
        body=body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or ""),
        attempts=attempts,
        destination=deliveryid.destination_of(delivery_id, data["destination"]),
    )


# --- every shard, as if there were one ------------------------------------------
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
        return await _list_on(
            client, keys, settings, appid=appid, account=account, destination=destination, limit=limit, offset=offset
        )
    # Each shard's first ``offset + limit`` hold the merged page: a longer read, never a wrong one.
    pages = await asyncio.gather(
        *(_list_on(c, k, settings, account=account, destination=destination, limit=offset + limit) for c, k in clients)
    )
    merged = sorted((letter for page in pages for letter in page), key=lambda d: d.dead_at or 0.0, reverse=True)
    return merged[offset : offset + limit]


async def show(
    clients: Sequence[ShardRedis], settings: Settings, delivery_id: str, *, account: str | None = None
) -> DeadLetterDetail:
    """The dead letter ``delivery_id`` from the shard that holds it; ``NotFound`` when none does."""
    return await first_found(clients, lambda shard: _show_on(*shard, settings, delivery_id, account=account), NotFound)


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
        return await _count_on(client, keys, settings, appid=appid, account=account, destination=destination)
    counts = await asyncio.gather(
        *(_count_on(c, k, settings, account=account, destination=destination) for c, k in clients)
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
    """:func:`svcgw.delivery.replay.replay` on every shard; a named id is ``not_found`` only if no shard has it."""
    if appid is not None:
        client, keys = await instance_shard(clients, appid)
        return await replaying.replay(client, keys, settings, ids, appid, all, account, since)
    answers = await asyncio.gather(
        *(replaying.replay(c, k, settings, ids=ids, all=all, account=account, since=since) for c, k in clients)
    )
    if not ids:
        return [result for answer in answers for result in answer]
    found: dict[str, ReplayResult] = {}
    for answer in answers:
        for result in answer:
            if result.status != "not_found" or result.id not in found:
                found[result.id] = result
    return [found[delivery_id] for delivery_id in dict.fromkeys(ids)]


# --- helpers -------------------------------------------------------------------
async def _scoped(
    redis: Redis, keys: KeySpace, settings: Settings, appid: str | None, account: str | None
) -> list[str]:
    """Every live dead letter of the instance and/or account (of the whole registry for neither), newest first."""
    if appid is None and account is None:
        return await newest(redis, keys.rq.failed(settings.queue_name))
    return await live_ids(redis, keys, settings, await candidates(redis, keys, appid=appid, account=account))


async def _of_destination(redis: Redis, keys: KeySpace, ids: Sequence[str], destination: str) -> list[str]:
    """The ids, in order, whose delivery went to ``destination`` (:data:`PRIMARY`: to the primary address).

    An id named by its post says where it goes (``svcgw.deliveryid``); only a ``dlv_`` one is read, its
    hash's ``destination`` field."""
    wanted = "" if destination == PRIMARY else destination
    unnamed = [delivery_id for delivery_id in ids if not deliveryid.parse_named(delivery_id)]
    read: dict[str, bytes | str | None] = {}
    for chunk in chunks(unnamed, CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for delivery_id in chunk:
                pipe.hget(keys.delivery(delivery_id), "destination")
            read.update(zip(chunk, await pipe.execute(), strict=True))
    return [
        delivery_id
        for delivery_id in ids
        if (deliveryid.destination_of(delivery_id, read.get(delivery_id)) or "") == wanted
    ]


async def _load(redis: Redis, keys: KeySpace, ids: Sequence[str]) -> list[DeadLetter]:
    """Dead letters for ids, in order; ids whose delivery data has expired are skipped."""
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id in ids:
            pipe.hmget(keys.delivery(delivery_id), list(_FIELDS))
            pipe.lindex(keys.delivery_attempts(delivery_id), -1)  # records of earlier versions
        replies = await pipe.execute()
    found = [dict(zip(_FIELDS, replies[2 * index], strict=True)) for index in range(len(ids))]
    counts = [attemptrecords.count_of(data["attempts"]) for data in found]
    # The last record is field a<count>, known once the count is read: a second round trip.
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id, count in zip(ids, counts, strict=True):
            if count:
                pipe.hget(keys.delivery(delivery_id), attemptrecords.field(count))
        lasts = iter(await pipe.execute())
    letters: list[DeadLetter] = []
    for index, delivery_id in enumerate(ids):
        data = found[index]
        last = (next(lasts) if counts[index] else None) or replies[2 * index + 1]
        if not data["appid"]:
            continue
        letters.append(
            DeadLetter(
                id=delivery_id,
                appid=field_text(data["appid"]),
                account=field_text(data["account"]),
                event_type=field_text(data["event_type"]),
                attempts=int(field_text(data["attempts"]) or 0),
                last_error=_last_error(_attempt(last)) if last else None,
                dead_at=field_float(data["dead_at"]),
                received_at=field_float(data["received_at"]) or deliveryid.received_at(delivery_id),
                destination=deliveryid.destination_of(delivery_id, data["destination"]),
            )
        )
    return letters


def _attempt(record: bytes | str) -> dict[str, Any]:
    try:
        value = orjson.loads(record)
    except orjson.JSONDecodeError:
        return {"error": "unreadable attempt record"}
    return value if isinstance(value, dict) else {"record": value}


def _last_error(attempt: dict[str, Any]) -> str | None:
    error = attempt.get("error")
    if error:
        return str(error)
    status = attempt.get("status")
    return f"HTTP {status}" if status is not None and not attempt.get("ok") else None
