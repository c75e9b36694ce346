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
but :func:`svcgw.delivery.byid.show` still finds it.

The pure half, stored fields to a :class:`Delivery` (:func:`build`,
:func:`event_ids`, :func:`state_of`), is :mod:`svcgw.delivery.view`; what this
reader shares with the by-id one (:mod:`svcgw.delivery.byid`: :func:`~svcgw.delivery.byid.show`,
and ``deliveries_of`` for ids found elsewhere) is :mod:`svcgw.delivery.posts`; this module reads
a page of the log (:func:`list_deliveries`). With an ``account``, a delivery or an
instance of another account is treated exactly like one that does not exist.

Errors: ``svcgw.errors.Invalid`` (also a ValueError), a filter or cursor that
cannot be used; and ``svcgw.errors.NotFound`` (``what`` "instance"): no such
instance, or another account's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import cast

from redis.asyncio import Redis

from svcgw.config.settings import Settings
from svcgw.delivery import attemptrecords
from svcgw.delivery.posts import FIELDS, ID_FIELDS, PRIMARY, Item, Posts, as_bytes, complete
from svcgw.delivery.view import (
    STATES,
    AttemptRecord,
    Delivery,
    Page,
    build,
    event_ids,
    field_float,
    field_text,
    state_of,
)
from svcgw.errors import Invalid, NotFound
from svcgw.intake.calllog import window_start
from svcgw.storage.keys import KeySpace

__all__ = [
    "MAX_LIMIT",
    "PRIMARY",
    "STATES",
    "AttemptRecord",
    "Delivery",
    "Page",
    "build",
    "cursor",
    "event_ids",
    "list_deliveries",
    "parse_cursor",
    "parse_destination",
    "state_of",
]

SCAN_CHUNK = 200
# At most this many posts of the log are looked at for one page: a filter that matches little
# answers with what it found and a cursor to go on from, never a scan of a whole day.
SCAN_LIMIT = 5000
MAX_LIMIT = 200


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
    looked_at: dict[str, Item] = {}  # the log's view of each delivery looked at, by id
    posts = Posts(appid, owner, moment, settings.log_retention)
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
        chunk: list[Item] = []
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
    gone = await complete(redis, keys, recorded, counts, bodies_read=event_id is not None)
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


async def _matching(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    chunk: Sequence[Item],
    state: str | None,
    event_type: str | None,
    event_id: str | None,
    wanted: int,
    posts: Posts,
) -> list[tuple[Delivery, int, int]]:
    """The deliveries of ``chunk`` that pass the filters, with their positions in it and attempt counts.

    A delivered delivery with no record left (named by its post) comes with its bare attempts and
    the count -1.

    Bodies are read here only to look for an event id; the others' are read
    for the matches alone (:func:`_complete`).
    """
    if not chunk:
        return []  # posts that made no delivery; and ZMSCORE takes at least one member
    names = (*FIELDS, attemptrecords.COUNT, *ID_FIELDS) if event_id is not None else (*FIELDS, attemptrecords.COUNT)
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
            if not body or event_id.encode() not in as_bytes(body):
                continue  # a cheap look first: most bodies do not hold the id at all
        delivery = build(delivery_id, data, scheduled_at=field_float(scores[position]))
        if delivery is None or (event_id is not None and event_id not in delivery.event_ids):
            continue
        result.append((delivery, position, attemptrecords.count_of(data[attemptrecords.COUNT])))
        if len(result) >= wanted:
            break
    return result
