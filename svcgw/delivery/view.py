"""A delivery as it is shown, read from its stored records: pure, no Redis.

:func:`build` turns a delivery hash's fields and its attempt records into a
:class:`Delivery` with its :class:`AttemptRecord` list (one per attempt, as read); :func:`event_ids` and
:func:`ids_of` find its event ids, in the body or, once delivered, in the
list kept instead of it (:func:`stored_ids`); :func:`fanned_out` reads the
deliveries to further destinations a post's log entry names (its field
``f``). :mod:`svcgw.delivery.listing` reads the records from Redis and pages
through them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import orjson

from svcgw import deliveryid

__all__ = [
    "STATES",
    "AttemptRecord",
    "Delivery",
    "Page",
    "State",
    "attempt_of",
    "build",
    "event_ids",
    "fanned_out",
    "field_float",
    "field_text",
    "ids_of",
    "state_of",
    "stored_ids",
]

State = Literal["pending", "retrying", "delivered", "dead"]
STATES: tuple[State, ...] = ("pending", "retrying", "delivered", "dead")


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a delivery as the read model shows it (``svcgw.delivery.attempt.Attempt``: one being made)."""

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
    attempts: tuple[AttemptRecord, ...] = field(default=())
    # The further destination (``dst_…``) it goes to; None for the primary address's delivery.
    destination: str | None = None

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
            "destination": self.destination,
            "attempts": [attempt.as_dict() for attempt in self.attempts],
        }


@dataclass(frozen=True)
class Page:
    deliveries: list[Delivery]
    next_before: str | None  # the cursor of the next (older) page; None at the end
    scanned: int  # how many deliveries were looked at

    def as_dict(self) -> dict[str, object]:
        return {"deliveries": [d.as_dict() for d in self.deliveries], "next_before": self.next_before}


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


def fanned_out(value: bytes | str | None, primary: str = "") -> list[tuple[str, str]]:
    """The ``(delivery id, destination id)`` pairs of a log entry's field ``f``, in routing order.

    The field holds, separated by one space, the destination ids when the post's deliveries are
    named by it (each id follows from ``primary``, the post's delivery to the primary address:
    :func:`svcgw.deliveryid.for_destination`), or ``<delivery id>:<destination id>`` pairs (``dlv_``
    ids); a post that went to the primary address alone has none. One that cannot be read is skipped.
    """
    pairs: list[tuple[str, str]] = []
    for pair in field_text(value).split():
        delivery_id, colon, destination = pair.partition(":")
        if not colon:
            destination, delivery_id = pair, deliveryid.for_destination(primary, pair) or ""
        if delivery_id and destination:
            pairs.append((delivery_id, destination))
    return pairs


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


def attempt_of(record: bytes | str, number: int) -> AttemptRecord:
    """One stored attempt record; an unreadable one says so instead of failing the page."""
    try:
        data = orjson.loads(record)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return AttemptRecord(number, None, False, None, "unreadable attempt record", None, "", None)
    status = data.get("status")
    return AttemptRecord(
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
    appid = field_text(fields.get("appid"))
    if not appid:
        return None
    state = state_of(field_text(fields.get("state")))
    next_at: float | None = None
    if state == "retrying":
        next_at = scheduled_at if scheduled_at is not None else field_float(fields.get("next_at"))
    elif state == "pending" and scheduled_at is not None:
        next_at = scheduled_at  # held back a moment (its destination or account was busy)
    return Delivery(
        id=delivery_id,
        appid=appid,
        account=field_text(fields.get("account")),
        event_type=field_text(fields.get("event_type")),
        event_ids=ids_of(fields),
        state=state,
        received_at=field_float(fields.get("received_at")) or deliveryid.received_at(delivery_id),
        next_attempt_at=next_at,
        delivered_at=field_float(fields.get("delivered_at")) if state == "delivered" else None,
        dead_at=field_float(fields.get("dead_at")) if state == "dead" else None,
        attempts=tuple(attempt_of(record, index + 1) for index, record in enumerate(attempts)),
        destination=deliveryid.destination_of(delivery_id, fields.get("destination")),
    )


def field_text(value: Any) -> str:
    """A stored field as text ('' for none)."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def field_float(value: Any) -> float | None:
    """A stored field as a number; None for none or one that is not a number."""
    text = field_text(value)
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
