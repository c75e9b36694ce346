"""The deliveries of an instance, as the console, its API and ``svcgw deliveries`` show them.

Every delivery an instance received in the last ``SVCGW_LOG_RETENTION``
seconds, newest first, whatever became of it:

* **pending**: queued for its first attempt (or for a replayed dead letter's
  fresh one), or being attempted;
* **retrying**: at least one attempt failed and another is scheduled;
* **delivered**: an attempt was answered 2xx;
* **dead**: its retries ran out; a dead letter (``svcgw dlq``).

Each comes with every attempt (time, HTTP status or error, duration, the
first 1 KB of the answer's body) and the time of the next attempt.

The list is read from the instance's callback log (``svcgw.intake.calllog``: each
post's entry is its delivery's name, ``svcgw.deliveryid``, or names it in a
``delivery`` field: service events and entries of earlier versions) and the
delivery records themselves; a delivered delivery named by its entry has no
record left, only its post and a bare outcome (``svcgw.delivery.outcomes``: each
attempt's time, status or error class and duration; the destination and the
answers are kept only for deliveries that did not succeed). The log is the
index: a separate one cost every post three Redis commands and every event
50 to 200 bytes for the day. A post that also went to further destinations
(``docs/destinations.md``) names their deliveries in its entry's field ``f``
(``svcgw.delivery.view.fanned_out``: their destinations, the ids following
from the post's, or ``dlv_`` ids): the list shows the primary address's
delivery, then each of those, read from its own hash, or, once delivered, from
its bare outcome as the primary's (kept under the post's entry id and the
destination's); a :class:`Delivery` names its ``destination`` (None for the primary's). A page's
cursor is a log entry id, followed by ``:<n>`` when the page ended within a
post's deliveries (the next page starts at that post's ``n``-th). A delivery
still retrying after the log's retention has passed drops out of the list,
but :func:`show` still finds it.

The pure half, stored fields to a :class:`Delivery` (:func:`build`,
:func:`event_ids`, :func:`state_of`), is :mod:`svcgw.delivery.view`; this
module reads Redis (:func:`list_deliveries`, :func:`show`, and
:func:`deliveries_of` for ids found elsewhere: a further destination's index,
:mod:`svcgw.delivery.bydestination`). With an ``account``, a delivery or an
instance of another account is treated exactly like one that does not exist.

Errors: ``svcgw.errors.Invalid`` (also a ValueError), a filter or cursor that
cannot be used; and ``svcgw.errors.NotFound`` (``what`` "instance" or "delivery"): no such
instance or delivery, or another account's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple, cast

from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import attemptrecords, outcomereads
from svcgw.delivery.outcomes import Outcome
from svcgw.delivery.outcomes import delivered as delivered_outcome
from svcgw.delivery.view import (
    STATES,
    AttemptRecord,
    Delivery,
    Page,
    attempt_of,
    build,
    event_ids,
    fanned_out,
    field_float,
    field_text,
    ids_of,
    state_of,
    stored_ids,
)
from svcgw.errors import Invalid, NotFound
from svcgw.intake.calllog import body_of, in_window, made_delivery, window_start
from svcgw.storage.keys import KeySpace

__all__ = [
    "PRIMARY",
    "STATES",
    "AttemptRecord",
    "Delivery",
    "Page",
    "build",
    "deliveries_of",
    "event_ids",
    "ids_of",
    "list_deliveries",
    "show",
    "state_of",
    "stored_ids",
]

# The delivery hash fields the list reads (the body only when it needs the event ids).
FIELDS = (
    "appid", "account", "event_type", "state", "received_at", "next_at", "delivered_at", "dead_at", "destination",
)  # fmt: skip
# Where the event ids are: the body, or, once delivered, the list kept instead of it (stored_ids).
_ID_FIELDS = ("body", "ids")
SCAN_CHUNK = 200
# At most this many posts of the log are looked at for one page: a filter that matches little
# answers with what it found and a cursor to go on from, never a scan of a whole day.
SCAN_LIMIT = 5000
MAX_LIMIT = 200
# The destination filter's value for the primary address's deliveries alone.
PRIMARY = "primary"


_CURSOR = re.compile(r"([0-9]{1,20}-[0-9]{1,20})(?::([0-9]{1,4}))?")
_DESTINATION = re.compile(r"dst_[0-9A-Za-z_-]{1,100}")


def parse_cursor(before: str) -> tuple[str, int]:
    """Where the previous page ended: a log entry id, and how many of its post's deliveries it showed.

    0 when it showed them all: the page starts below that entry.
    """
    match = _CURSOR.fullmatch(before)
    if match is None:
        raise Invalid("before must be the next_before of a previous page")
    return match.group(1), int(match.group(2) or 0)


def cursor(entry_id: str, shown: int = 0) -> str:
    """The cursor below ``entry_id``; within it, after its first ``shown`` deliveries, when not 0."""
    return f"{entry_id}:{shown}" if shown else entry_id


def parse_destination(value: str | None) -> str | None:
    """The destination filter: a ``dst_…`` id, :data:`PRIMARY`, or None (every delivery)."""
    if value is None or value == PRIMARY or _DESTINATION.fullmatch(value):
        return value
    raise Invalid(f"destination must be a destination id (dst_...) or {PRIMARY}")


class _Item(NamedTuple):
    """One delivery a log entry names."""

    delivery_id: str
    entry_id: str
    destination: str | None  # None: the primary address's
    place: int  # its place among the entry's deliveries: 0 the primary's, then the pairs of its field f
    more: bool  # whether another delivery of the entry passes the destination filter after it

    @property
    def outcome_key(self) -> str:
        """Where its bare outcome is kept once delivered (svcgw.delivery.outcomes)."""
        return deliveryid.outcome_key(self.entry_id, self.destination)


# --- reading Redis ----------------------------------------------------------------------
async def list_deliveries(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    appid: str,
    *,
    account: str | None = None,
    state: str | None = None,
    event_type: str | None = None,
    event_id: str | None = None,
    destination: str | None = None,
    limit: int = 50,
    before: str | None = None,
    now: float | None = None,
) -> Page:
    """One page of the instance's deliveries, newest first, with their attempts.

    Filters combine (all must match); ``destination`` is a ``dst_…`` id (its
    deliveries alone) or :data:`PRIMARY` (the primary address's alone).
    ``before`` is the previous page's ``next_before``. At most
    :data:`SCAN_LIMIT` posts of the log are looked at per call; when the
    filters matched fewer than ``limit`` of them, the page is short and
    ``next_before`` says where to go on.
    """
    if state is not None and state not in STATES:
        raise Invalid(f"state must be one of {', '.join(STATES)}")
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid(f"limit must be from 1 to {MAX_LIMIT}")
    destination = parse_destination(destination)
    start, skip = parse_cursor(before) if before else ("", 0)
    owner = field_text(await redis.hget(keys.instance(appid), "account"))
    if not owner or (account is not None and owner != account):
        raise NotFound(f"no instance {appid[:200]!r}", what="instance")
    moment = time.time() if now is None else now
    oldest = window_start(moment, settings.log_retention)
    log_key = keys.callback_log(appid)
    # Within a post's deliveries: that post again, without those shown; else below it.
    top = (start if skip else "(" + start) if start else "+"
    found: list[Delivery] = []
    counts: dict[str, int] = {}  # attempts per delivery found, to read their records by field name
    looked_at: dict[str, _Item] = {}  # the log's view of each delivery looked at, by id
    posts = _Posts(appid, owner, moment, settings.log_retention)
    scanned = 0
    last: str | None = None  # the entry id the next page starts below
    while len(found) < limit and scanned < SCAN_LIMIT:
        asked = min(SCAN_CHUNK, SCAN_LIMIT - scanned)
        rows = cast(
            list[tuple[bytes | str, dict[bytes | str, bytes | str]]],
            await redis.xrevrange(log_key, top, oldest, count=asked),
        )
        if not rows:
            last = None  # nothing older: no next page
            break
        # Posts whose every event was a repeat made no delivery.
        chunk: list[_Item] = []
        for entry_id, fields in rows:
            items = posts.items_of(field_text(entry_id), fields, destination)
            if skip and items and items[0].entry_id == start:
                items = [item for item in items if item.place >= skip]
            chunk.extend(items)
        skip = 0
        looked_at.update((item.delivery_id, item) for item in chunk)
        matched = await _matching(redis, keys, settings, chunk, state, event_type, event_id, limit - len(found), posts)
        found.extend(delivery for delivery, _, _ in matched)
        counts.update((delivery.id, count) for delivery, _, count in matched if count >= 0)
        if matched and len(found) >= limit:
            # Stopped within the chunk: the next page starts after the last delivery taken.
            taken = chunk[matched[-1][1]]
            last = cursor(taken.entry_id, taken.place + 1 if taken.more else 0)
            scanned += next(n for n, (entry_id, _) in enumerate(rows, 1) if field_text(entry_id) == taken.entry_id)
            break
        scanned += len(rows)
        last = cursor(field_text(rows[-1][0]))
        top = "(" + field_text(rows[-1][0])
    # Delivered deliveries named by their posts came with their bare attempts already.
    recorded = [delivery for delivery in found if delivery.id in counts]
    gone = await _complete(redis, keys, recorded, counts, bodies_read=event_id is not None)
    completed = {delivery.id: delivery for delivery in recorded}
    # A delivery named by its post that was delivered between the two reads has only its bare
    # outcome now (written as its record was deleted): shown as it is now, delivered.
    bare = [looked_at[i] for i in gone if i in looked_at and posts.bare(looked_at[i], {})]
    if bare:
        outcomes = await posts.outcomes(redis, keys, [item.outcome_key for item in bare])
        completed.update((item.delivery_id, posts.delivered(item, outcomes.get(item.outcome_key))) for item in bare)
    found = [completed.get(delivery.id, delivery) for delivery in found]
    following = None
    if last is not None:
        below, within = parse_cursor(last)
        if within or await redis.xrevrange(log_key, "(" + below, oldest, count=1):
            following = last
    return Page(found, following, scanned)


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
    vanished = await _complete(redis, keys, recorded, counts, bodies_read=False)
    completed = {delivery.id: delivery for delivery in recorded}
    # Delivered between the two reads: what is kept of it now (list_deliveries says why).
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
    wanted: dict[str, list[_Item]] = {}
    posts: dict[str, _Posts] = {}
    for (delivery_id, (appid, entry_id, _)), rows in zip(named, replies[len(appids) :], strict=True):
        owner = field_text(owners[appid])
        if not owner or (account is not None and owner != account) or not rows:
            continue
        if not in_window(entry_id, now, settings.log_retention):
            continue  # its post is past the log's retention, as if trimmed
        book = posts.setdefault(appid, _Posts(appid, owner, now, settings.log_retention))
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
    data = {name: stored.get(name) for name in (*FIELDS, *_ID_FIELDS)}
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
    posts = _Posts(appid, field_text(owner), now, settings.log_retention)
    # The post's own delivery, or one of its further destinations' (its field f names it).
    items = [item for item in posts.items_of(entry_id, rows[0][1], None) if item.delivery_id == delivery_id]
    if not items:
        raise NotFound(f"no delivery {delivery_id!r}", what="delivery")
    key = items[0].outcome_key
    return posts.delivered(items[0], (await posts.outcomes(redis, keys, [key])).get(key))


async def _matching(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    chunk: Sequence[_Item],
    state: str | None,
    event_type: str | None,
    event_id: str | None,
    wanted: int,
    posts: _Posts,
) -> list[tuple[Delivery, int, int]]:
    """The deliveries of ``chunk`` that pass the filters, with their positions in it and attempt counts.

    A delivered delivery with no record left (named by its post) comes with its bare attempts and
    the count -1.

    Bodies are read here only to look for an event id; the others' are read
    for the matches alone (:func:`_complete`).
    """
    if not chunk:
        return []  # posts that made no delivery; and ZMSCORE takes at least one member
    names = (*FIELDS, attemptrecords.COUNT, *_ID_FIELDS) if event_id is not None else (*FIELDS, attemptrecords.COUNT)
    scheduled_key = keys.rq.scheduled(settings.queue_name)
    async with redis.pipeline(transaction=False) as pipe:
        for item in chunk:
            pipe.hmget(keys.delivery(item.delivery_id), list(names))
        pipe.zmscore(scheduled_key, [item.delivery_id for item in chunk])
        replies = await pipe.execute()
    scores = replies[-1]
    records = [dict(zip(names, values, strict=True)) for values in replies[:-1]]
    bare = [item.outcome_key for item, data in zip(chunk, records, strict=True) if posts.bare(item, data)]
    outcomes = await posts.outcomes(redis, keys, bare if state in (None, "delivered") else [])
    result: list[tuple[Delivery, int, int]] = []
    for position, (item, data) in enumerate(zip(chunk, records, strict=True)):
        delivery_id = item.delivery_id
        if posts.bare(item, data):
            if state not in (None, "delivered"):
                continue
            shown = posts.delivered(item, outcomes.get(item.outcome_key))
            if (event_type is None or shown.event_type == event_type) and (
                event_id is None or event_id in shown.event_ids
            ):
                result.append((shown, position, -1))
                if len(result) >= wanted:
                    break
            continue
        if event_type is not None and field_text(data["event_type"]) != event_type:
            continue
        if state is not None and state_of(field_text(data["state"])) != state:
            continue
        if event_id is not None:
            body = data["body"] or data["ids"]
            if not body or event_id.encode() not in _bytes(body):
                continue  # a cheap look first: most bodies do not hold the id at all
        delivery = build(delivery_id, data, scheduled_at=field_float(scores[position]))
        if delivery is None or (event_id is not None and event_id not in delivery.event_ids):
            continue
        result.append((delivery, position, attemptrecords.count_of(data[attemptrecords.COUNT])))
        if len(result) >= wanted:
            break
    return result


class _Posts:
    """One instance's log entries as a page reads them: the delivery each made, and the posts of those named by them."""

    def __init__(self, appid: str, account: str, now: float, retention: int) -> None:
        self.appid, self.account, self.now, self.retention = appid, account, now, retention
        self.bodies: dict[str, bytes] = {}  # log entry id -> the post as stored, for deliveries it names

    def delivery_of(self, entry_id: str, fields: Mapping[bytes | str, bytes | str]) -> str:
        """The id of the delivery the entry made; '' when every event of its post was a repeat."""
        named = fields.get(b"delivery", fields.get("delivery"))
        if named is not None:
            return field_text(named)  # a service event's, or an entry of an earlier version
        if not made_delivery(fields):
            return ""
        self.bodies[entry_id] = _bytes(fields.get(b"body", fields.get("body", b"")))
        return deliveryid.from_entry(self.appid, entry_id)

    def items_of(
        self, entry_id: str, fields: Mapping[bytes | str, bytes | str], destination: str | None
    ) -> list[_Item]:
        """The deliveries the entry names that pass the ``destination`` filter: the primary's, then its field f's."""
        primary = self.delivery_of(entry_id, fields)
        if not primary:
            return []
        every = [(primary, None), *fanned_out(fields.get(b"f", fields.get("f")), primary)]
        kept = [
            (place, delivery_id, target)
            for place, (delivery_id, target) in enumerate(every)
            if destination is None or target == (None if destination == PRIMARY else destination)
        ]
        return [
            _Item(delivery_id, entry_id, target, place, n < len(kept) - 1)
            for n, (place, delivery_id, target) in enumerate(kept)
        ]

    def bare(self, item: _Item, record: Mapping[str, bytes | str | None]) -> bool:
        """Whether the delivery is delivered with only its bare outcome left (no record, named by its post)."""
        return (
            item.entry_id in self.bodies
            and not record.get("appid")
            and deliveryid.parse_named(item.delivery_id) is not None
        )

    async def outcomes(self, redis: Redis, keys: KeySpace, outcome_keys: Sequence[str]) -> dict[str, Outcome]:
        """The bare outcomes found, by :attr:`_Item.outcome_key`."""
        return await outcomereads.find(redis, keys, self.appid, outcome_keys, now=self.now, retention=self.retention)

    def delivered(self, item: _Item, outcome: Outcome | None) -> Delivery:
        body = body_of(self.bodies[item.entry_id])
        shown = delivered_outcome(item.delivery_id, self.appid, self.account, item.entry_id, body, outcome)
        return replace(shown, destination=item.destination) if item.destination else shown


async def _complete(
    redis: Redis, keys: KeySpace, found: list[Delivery], counts: Mapping[str, int], *, bodies_read: bool
) -> set[str]:
    """Give each delivery found its attempts, and its event ids unless its body was read already.

    ``counts`` are the deliveries' attempt counts: their records are the hash's fields of those numbers.
    Returns the ids whose hash was gone by this read (delivered, or expired, since the first).
    """
    gone: set[str] = set()
    if not found:
        return gone
    async with redis.pipeline(transaction=False) as pipe:
        for delivery in found:
            names = attemptrecords.fields(counts.get(delivery.id, 0))
            pipe.lrange(keys.delivery_attempts(delivery.id), 0, -1)  # records of earlier versions
            wanted = [*names, *([] if bodies_read else _ID_FIELDS)]
            pipe.hmget(keys.delivery(delivery.id), wanted or [attemptrecords.COUNT])  # HMGET needs a field
        replies = iter(await pipe.execute())
    for index, delivery in enumerate(found):
        count = counts.get(delivery.id, 0)
        legacy, values = next(replies), next(replies)
        if not legacy and all(value is None for value in values):
            gone.add(delivery.id)
        records = attemptrecords.merged(count, values[:count], legacy)
        ids = delivery.event_ids if bodies_read else ids_of(dict(zip(_ID_FIELDS, values[count:], strict=True)))
        attempts = tuple(attempt_of(record, number + 1) for number, record in enumerate(records))
        found[index] = replace(delivery, attempts=attempts, event_ids=ids)
    return gone


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")
