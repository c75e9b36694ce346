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

The list is read from the instance's callback log (``svcgw.calllog``: each
post's entry names the delivery it made, and a service event's delivery is
logged the same way) and the delivery records themselves. The log is the
index: a separate one cost every post three Redis commands and every event
50 to 200 bytes for the day. A page's cursor is a log entry id. A delivery
still retrying after the log's retention has passed drops out of the list,
but :func:`show` still finds it.

The module has two halves: pure functions that turn stored fields into a
:class:`Delivery` (:func:`build`, :func:`event_ids`, :func:`state_of`) and
coroutines that read Redis (:func:`list_deliveries`, :func:`show`). With an
``account``, a delivery or an instance of another account is treated
exactly like one that does not exist.

Errors::

    DeliveryListError
    ├── NotFound      (also a LookupError) no such delivery or instance, or another account's
    └── Invalid       (also a ValueError) a filter or cursor that cannot be used
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import orjson
from redis.asyncio import Redis

from . import attemptrecords, keys
from .errors import Missing, SvcgwError
from .settings import Settings

__all__ = [
    "STATES",
    "Attempt",
    "Delivery",
    "DeliveryListError",
    "Invalid",
    "NotFound",
    "Page",
    "build",
    "event_ids",
    "ids_of",
    "list_deliveries",
    "show",
    "state_of",
    "stored_ids",
]

State = Literal["pending", "retrying", "delivered", "dead"]
STATES: tuple[State, ...] = ("pending", "retrying", "delivered", "dead")

# The delivery hash fields the list reads (the body only when it needs the event ids).
FIELDS = ("appid", "account", "event_type", "state", "received_at", "next_at", "delivered_at", "dead_at")
# Where the event ids are: the body, or, once delivered, the list kept instead of it (stored_ids).
_ID_FIELDS = ("body", "ids")
SCAN_CHUNK = 200
# At most this many posts of the log are looked at for one page: a filter that matches little
# answers with what it found and a cursor to go on from, never a scan of a whole day.
SCAN_LIMIT = 5000
MAX_LIMIT = 200


class DeliveryListError(SvcgwError):
    """Base class of this module's errors."""


class NotFound(DeliveryListError, Missing, LookupError):
    """No such delivery or instance (or it belongs to another account)."""


class Invalid(DeliveryListError, ValueError):
    """A filter or cursor that cannot be used; the message says which."""


@dataclass(frozen=True)
class Attempt:
    number: int
    at: float | None
    ok: bool
    status: int | None
    error: str | None
    duration_ms: float | None
    response: str
    destination: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "attempt": self.number,
            "at": self.at,
            "ok": self.ok,
            "status": self.status,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "response": self.response,
            "destination": self.destination,
        }

    @property
    def outcome(self) -> str:
        """``HTTP 200``, ``HTTP 503``, or the error text."""
        if self.error:
            return self.error
        return f"HTTP {self.status}" if self.status is not None else "no answer"


@dataclass(frozen=True)
class Delivery:
    id: str
    appid: str
    account: str
    event_type: str
    event_ids: tuple[str, ...]
    state: State
    received_at: float | None
    next_attempt_at: float | None  # None: none is scheduled (pending ones are attempted as soon as a worker is free)
    delivered_at: float | None
    dead_at: float | None
    attempts: tuple[Attempt, ...] = field(default=())

    @property
    def last_outcome(self) -> str | None:
        return self.attempts[-1].outcome if self.attempts else None

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "appid": self.appid,
            "event_type": self.event_type,
            "event_ids": list(self.event_ids),
            "state": self.state,
            "received_at": self.received_at,
            "next_attempt_at": self.next_attempt_at,
            "delivered_at": self.delivered_at,
            "dead_at": self.dead_at,
            "attempts": [attempt.as_dict() for attempt in self.attempts],
        }


@dataclass(frozen=True)
class Page:
    deliveries: list[Delivery]
    next_before: str | None  # the cursor of the next (older) page; None at the end
    scanned: int  # how many deliveries were looked at

    def as_dict(self) -> dict[str, object]:
        return {"deliveries": [d.as_dict() for d in self.deliveries], "next_before": self.next_before}


# --- pure: stored fields to a Delivery ---------------------------------------------
def state_of(stored: str) -> State:
    """The state shown for the delivery hash's ``state`` field."""
    if stored in ("retrying", "delivered", "dead"):
        return cast(State, stored)
    return "pending"  # 'queued', and anything unexpected: not finished


def event_ids(body: bytes | str | None) -> tuple[str, ...]:
    """The ``id`` of each event of a forward body, as its text (events without one are skipped).

    Numbers keep their digits: an id beyond 64 bits (which orjson reads as a
    float) is read again with the standard library, keeping the number's text.
    """
    if not body:
        return ()
    try:
        found = _ids(orjson.loads(body))
    except orjson.JSONDecodeError:
        found = None
    if found is None:
        try:
            found = _ids(json.loads(body, parse_int=str, parse_float=str)) or []
        except ValueError:
            return ()
    return tuple(found)


def stored_ids(body: bytes) -> bytes:
    """What a delivered delivery keeps instead of its body (the ``ids`` field): its event ids, a JSON list.

    The callback log holds the post already; the list needs only the ids.
    """
    return orjson.dumps(list(event_ids(body)))


def ids_of(fields: Mapping[str, bytes | str | None]) -> tuple[str, ...]:
    """The event ids of a delivery hash: from its body, or, once delivered, from its ``ids``."""
    body = fields.get("body")
    if body:
        return event_ids(body)
    try:
        listed = orjson.loads(fields.get("ids") or b"[]")
    except orjson.JSONDecodeError:
        return ()
    return tuple(str(value) for value in listed) if isinstance(listed, list) else ()


def _ids(document: Any) -> list[str] | None:
    """The ids' texts; None when one is a number orjson could not keep exactly."""
    events = document.get("events") if isinstance(document, dict) else None
    if not isinstance(events, list):
        return []
    found: list[str] = []
    for event in events:
        value = event.get("id") if isinstance(event, dict) else None
        if isinstance(value, float):
            return None
        if isinstance(value, bool) or value is None or value == "":
            continue
        if isinstance(value, str | int):
            found.append(str(value))
    return found


def attempt_of(record: bytes | str, number: int) -> Attempt:
    """One stored attempt record; an unreadable one says so instead of failing the page."""
    try:
        data = orjson.loads(record)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return Attempt(number, None, False, None, "unreadable attempt record", None, "", None)
    status = data.get("status")
    return Attempt(
        number=_int(data.get("attempt"), number),
        at=_number(data.get("at")),
        ok=bool(data.get("ok")),
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        error=str(data["error"]) if data.get("error") else None,
        duration_ms=_number(data.get("duration_ms")),
        response=str(data.get("response") or ""),
        destination=str(data["destination"]) if data.get("destination") else None,
    )


def build(
    delivery_id: str,
    fields: Mapping[str, bytes | str | None],
    attempts: Sequence[bytes | str] = (),
    *,
    scheduled_at: float | None = None,
) -> Delivery | None:
    """The delivery for its hash's fields (``body`` and ``ids`` among them for the event ids); None if it expired.

    ``scheduled_at`` is its score in the scheduled registry, when it is
    there: the exact time of the next attempt.
    """
    appid = _text(fields.get("appid"))
    if not appid:
        return None
    state = state_of(_text(fields.get("state")))
    next_at: float | None = None
    if state == "retrying":
        next_at = scheduled_at if scheduled_at is not None else _float(fields.get("next_at"))
    elif state == "pending" and scheduled_at is not None:
        next_at = scheduled_at  # held back a moment (its destination or account was busy)
    return Delivery(
        id=delivery_id,
        appid=appid,
        account=_text(fields.get("account")),
        event_type=_text(fields.get("event_type")),
        event_ids=ids_of(fields),
        state=state,
        received_at=_float(fields.get("received_at")),
        next_attempt_at=next_at,
        delivered_at=_float(fields.get("delivered_at")) if state == "delivered" else None,
        dead_at=_float(fields.get("dead_at")) if state == "dead" else None,
        attempts=tuple(attempt_of(record, index + 1) for index, record in enumerate(attempts)),
    )


_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


def parse_cursor(before: str) -> str:
    """The log entry id of the last delivery looked at on the previous page."""
    if not _ENTRY_ID.fullmatch(before):
        raise Invalid("before must be the next_before of a previous page")
    return before


def cursor(entry_id: str) -> str:
    return entry_id


# --- reading Redis ----------------------------------------------------------------------
async def list_deliveries(
    redis: Redis,
    settings: Settings,
    appid: str,
    *,
    account: str | None = None,
    state: str | None = None,
    event_type: str | None = None,
    event_id: str | None = None,
    limit: int = 50,
    before: str | None = None,
    now: float | None = None,
) -> Page:
    """One page of the instance's deliveries, newest first, with their attempts.

    Filters combine (all must match). ``before`` is the previous page's
    ``next_before``. At most :data:`SCAN_LIMIT` posts of the log are looked at per
    call; when the filters matched fewer than ``limit`` of them, the page is
    short and ``next_before`` says where to go on.
    """
    if state is not None and state not in STATES:
        raise Invalid(f"state must be one of {', '.join(STATES)}")
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid(f"limit must be from 1 to {MAX_LIMIT}")
    if account is not None and _text(await redis.hget(keys.instance(appid), "account")) != account:
        raise NotFound(f"no instance {appid[:200]!r}")
    if account is None and not await redis.exists(keys.instance(appid)):
        raise NotFound(f"no instance {appid[:200]!r}")
    moment = time.time() if now is None else now
    oldest = str(max(int((moment - settings.log_retention) * 1000), 0))
    log_key = keys.callback_log(appid)
    top = "(" + parse_cursor(before) if before else "+"
    found: list[Delivery] = []
    counts: dict[str, int] = {}  # attempts per delivery found, to read their records by field name
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
        chunk = [
            (_text(fields.get(b"delivery") or fields.get("delivery") or ""), _text(entry_id))
            for entry_id, fields in rows
        ]
        chunk = [(delivery_id, entry_id) for delivery_id, entry_id in chunk if delivery_id]
        matched = await _matching(redis, settings, chunk, state, event_type, event_id, limit - len(found))
        found.extend(delivery for delivery, _, _ in matched)
        counts.update((delivery.id, count) for delivery, _, count in matched)
        if matched and len(found) >= limit:
            # Stopped within the chunk: the next page starts below the last delivery taken.
            last = chunk[matched[-1][1]][1]
            scanned += next(n for n, (entry_id, _) in enumerate(rows, 1) if _text(entry_id) == last)
            break
        scanned += len(rows)
        last = _text(rows[-1][0])
        top = "(" + last
    await _complete(redis, found, counts, bodies_read=event_id is not None)
    following = None
    if last is not None and await redis.xrevrange(log_key, "(" + last, oldest, count=1):
        following = cursor(last)
    return Page(found, following, scanned)


async def show(redis: Redis, settings: Settings, delivery_id: str, *, account: str | None = None) -> Delivery:
    """One delivery with every attempt; ``NotFound`` if it expired (or is another account's)."""
    if not delivery_id or len(delivery_id) > 200:
        raise NotFound("no such delivery")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.delivery(delivery_id))  # with its attempt records, fields a1 .. aN
        pipe.lrange(keys.delivery_attempts(delivery_id), 0, -1)  # records of earlier versions
        pipe.zscore(keys.rq_scheduled(settings.queue_name), delivery_id)
        whole, legacy, scheduled = await pipe.execute()
    stored = {_text(name): value for name, value in whole.items()}
    data = {name: stored.get(name) for name in (*FIELDS, *_ID_FIELDS)}
    if account is not None and _text(data["account"]) != account:
        raise NotFound(f"no delivery {delivery_id!r}")
    attempts = attemptrecords.from_hash(stored, legacy)
    delivery = build(delivery_id, data, attempts, scheduled_at=_float(scheduled))
    if delivery is None:
        raise NotFound(f"no delivery {delivery_id!r}")
    return delivery


async def _matching(
    redis: Redis,
    settings: Settings,
    chunk: Sequence[tuple[str, str]],  # (delivery id, log entry id)
    state: str | None,
    event_type: str | None,
    event_id: str | None,
    wanted: int,
) -> list[tuple[Delivery, int, int]]:
    """The deliveries of ``chunk`` that pass the filters, with their positions in it and attempt counts.

    Bodies are read here only to look for an event id; the others' are read
    for the matches alone (:func:`_complete`).
    """
    if not chunk:
        return []  # posts that made no delivery; and ZMSCORE takes at least one member
    names = (*FIELDS, attemptrecords.COUNT, *_ID_FIELDS) if event_id is not None else (*FIELDS, attemptrecords.COUNT)
    scheduled_key = keys.rq_scheduled(settings.queue_name)
    async with redis.pipeline(transaction=False) as pipe:
        for delivery_id, _ in chunk:
            pipe.hmget(keys.delivery(delivery_id), list(names))
        pipe.zmscore(scheduled_key, [delivery_id for delivery_id, _ in chunk])
        replies = await pipe.execute()
    scores = replies[-1]
    result: list[tuple[Delivery, int, int]] = []
    for position, ((delivery_id, _), values) in enumerate(zip(chunk, replies[:-1], strict=True)):
        data = dict(zip(names, values, strict=True))
        if event_type is not None and _text(data["event_type"]) != event_type:
            continue
        if state is not None and state_of(_text(data["state"])) != state:
            continue
        if event_id is not None:
            body = data["body"] or data["ids"]
            if not body or event_id.encode() not in _bytes(body):
                continue  # a cheap look first: most bodies do not hold the id at all
        delivery = build(delivery_id, data, scheduled_at=_float(scores[position]))
        if delivery is None or (event_id is not None and event_id not in delivery.event_ids):
            continue
        result.append((delivery, position, attemptrecords.count_of(data[attemptrecords.COUNT])))
        if len(result) >= wanted:
            break
    return result


async def _complete(redis: Redis, found: list[Delivery], counts: Mapping[str, int], *, bodies_read: bool) -> None:
    """Give each delivery found its attempts, and its event ids unless its body was read already.

    ``counts`` are the deliveries' attempt counts: their records are the hash's fields of those numbers.
    """
    if not found:
        return
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
        records = attemptrecords.merged(count, values[:count], legacy)
        ids = delivery.event_ids if bodies_read else ids_of(dict(zip(_ID_FIELDS, values[count:], strict=True)))
        attempts = tuple(attempt_of(record, number + 1) for number, record in enumerate(records))
        found[index] = replace(delivery, attempts=attempts, event_ids=ids)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _float(value: Any) -> float | None:
    text = _text(value)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
