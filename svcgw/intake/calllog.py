"""Reading the callback log: every post the receiver accepted, as it was received.

The receiver appends each post to the stream ``svcgw:log:{<appid>}`` and
trims it to ``SVCGW_LOG_RETENTION``. Bodies come back as the exact bytes
received, so the (``redis.asyncio``) client must not decode responses.

A body of :data:`COMPRESS_FROM` bytes or more is stored zlib-compressed when
that saves at least an eighth of it (:func:`stored_body`; a 1 KB ``Msg`` post
keeps about 60 %): the log is most of what a day of events costs in Redis.
A zlib stream starts with the byte ``x`` (0x78) and a JSON text never does
(only whitespace or ``{`` can open a stored post), so :func:`body_of` tells
the two apart without a field of its own, for entries of every version.

An entry is in one of two forms. One that names its delivery itself
(svcgw.deliveryid) holds ``body``, and ``x`` (``accepted:duplicates``) only
when not every event of the post went (a repeat among them, or no event):
the time received is its id's. One of a ``dlv_`` delivery (a service
event's, or one written by an earlier version) holds ``body``,
``received_at``, ``delivery`` ('' when none), ``accepted`` and
``duplicates``. :func:`received_at`, :func:`counts` and
:func:`made_delivery` read both.
"""

from __future__ import annotations

import base64
import re
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from svcgw.config.settings import Settings
from svcgw.deliveryid import from_entry, parse
from svcgw.storage.keys import KeySpace

__all__ = [
    "COMPRESS_FROM",
    "LogEntry",
    "body_of",
    "counts",
    "in_window",
    "made_delivery",
    "parse_since",
    "read_log",
    "received_at",
    "stored_body",
    "window_start",
]

# An entry's fields, named by bytes (a raw reply) or text.
Fields = Mapping[Any, Any]

# Below this, compressing saves a few bytes at best (an 84-byte post: 14) for the CPU it costs.
COMPRESS_FROM = 256
_ZLIB = b"x"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SINCE = re.compile(r"(\d+)([smhd])")


@dataclass(frozen=True)
class LogEntry:
    id: str  # the stream entry id, usable as ``before`` for the next page
    received_at: float
    body: bytes
    accepted: int
    duplicates: int
    delivery_id: str | None  # None when every event of the post was a duplicate
    state: str | None  # queued, retrying, delivered, dead; 'unknown' once expired; None without delivery

    def as_dict(self) -> dict[str, object]:
        try:
            body: dict[str, object] = {"body": self.body.decode("utf-8")}
        except UnicodeDecodeError:
            body = {"body": None, "body_base64": base64.b64encode(self.body).decode("ascii")}
        return {
            "id": self.id,
            "received_at": self.received_at,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "delivery_id": self.delivery_id,
            "state": self.state,
            **body,
        }


def stored_body(raw: bytes) -> bytes:
    """What the log keeps of a post: ``raw`` itself, or zlib-compressed when that pays."""
    if len(raw) < COMPRESS_FROM:
        return raw
    # Level 1: within a few bytes of the default's size on posts, and far quicker on large ones.
    packed = zlib.compress(raw, 1)
    return packed if len(packed) <= len(raw) - len(raw) // 8 else raw


def body_of(stored: bytes) -> bytes:
    """The post as received, from what :func:`stored_body` kept."""
    if not stored.startswith(_ZLIB):
        return stored
    return zlib.decompress(stored)


def parse_since(text: str) -> int:
    """Seconds in ``45s``, ``30m``, ``1h`` or ``2d``; ``ValueError`` with a readable message otherwise."""
    match = _SINCE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"a duration looks like 45s, 30m, 1h or 2d, got {text!r}")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"a duration must be longer than zero, got {text!r}")
    return seconds


async def read_log(
    redis: Redis,
    keys: KeySpace,
    settings: Settings,
    appid: str,
    *,
    since_seconds: float | None = None,
    limit: int = 100,
    before: str | None = None,
    now: float | None = None,
) -> list[LogEntry]:
    """Posts to one instance's receiver of the last ``SVCGW_LOG_RETENTION`` seconds, newest first.

    ``since_seconds`` keeps only the posts of a shorter last stretch of time;
    ``before`` (an entry id, exclusive) pages further back; ``now`` is the
    clock's (Unix seconds) by default. Posts older than the retention are
    never read, though Redis may still hold some: the log is trimmed a whole
    stream node at a time (:func:`window_start`).
    """
    if limit <= 0:
        return []
    newest = f"({before}" if before else "+"
    stretch = float(settings.log_retention)
    if since_seconds is not None:
        stretch = min(stretch, since_seconds)
    oldest = window_start(time.time() if now is None else now, stretch)
    rows = cast(
        list[tuple[bytes | str, dict[bytes | str, bytes | str]]],
        await redis.xrevrange(keys.callback_log(appid), newest, oldest, count=limit),
    )
    entries: list[tuple[str, dict[str, bytes]]] = []
    for entry_id, raw_fields in rows:
        entries.append((_text(entry_id), {_text(k): _bytes(v) for k, v in raw_fields.items()}))
    deliveries = [_delivery_of(appid, entry_id, fields) for entry_id, fields in entries]
    states: list[bytes | str | None] = []
    if any(deliveries):
        async with redis.pipeline(transaction=False) as pipe:
            for delivery_id in deliveries:
                if delivery_id:
                    pipe.hmget(keys.delivery(delivery_id), ["state", "appid"])
            found = iter(await pipe.execute())
        # A post's delivery has no state until an attempt ends (svcgw.storage.keys.delivery): queued.
        states = [_state(*next(found)) if delivery_id else None for delivery_id in deliveries]
    else:
        states = [None] * len(entries)
    result: list[LogEntry] = []
    for (entry_id, fields), delivery_id, state in zip(entries, deliveries, states, strict=True):
        accepted, duplicates = counts(fields)
        result.append(
            LogEntry(
                id=entry_id,
                received_at=received_at(entry_id, fields),
                body=body_of(fields.get("body", b"")),
                accepted=accepted,
                duplicates=duplicates,
                delivery_id=delivery_id or None,
                state=(_text(state) if state else _gone(delivery_id)) if delivery_id else None,
            )
        )
    return result


def window_start(now: float, seconds: float) -> str:
    """The lowest entry id of the last ``seconds`` before ``now``: the oldest a reader of the log shows.

    The ingest script trims the log by age with ``XADD … MINID ~``, which
    removes only whole stream nodes (up to 100 posts, or
    ``stream-node-max-bytes`` of them): a post stays stored until the newest
    post of its node is ``SVCGW_LOG_RETENTION`` old and another post comes
    (or the instance has had none for that long, and the whole log expires).
    So every reader asks for entries from this id on, never for what the
    stream still holds.
    """
    return str(max(int((now - seconds) * 1000), 0))


def in_window(entry_id: str, now: float, seconds: float) -> bool:
    """Whether the entry ``entry_id`` is of the last ``seconds`` before ``now`` (:func:`window_start`)."""
    return int(entry_id.partition("-")[0]) >= int(window_start(now, seconds))


def _field(fields: Fields, name: str) -> bytes | None:
    """A field of an entry read with names as bytes (a raw reply) or as text."""
    found = fields.get(name.encode())
    if found is None:
        found = fields.get(name)
    if found is None:
        return None
    return found if isinstance(found, bytes) else str(found).encode()


def received_at(entry_id: str, fields: Fields) -> float:
    """When the post was received: its ``received_at``, or its entry id's milliseconds."""
    stored = _field(fields, "received_at")
    if stored:
        return float(stored)
    return int(entry_id.partition("-")[0]) / 1000


def counts(fields: Fields) -> tuple[int, int]:
    """``(accepted, duplicates)`` of an entry; with neither field nor ``x``, every event of its post went."""
    accepted = _field(fields, "accepted")
    if accepted is not None:
        return int(accepted or 0), int(_field(fields, "duplicates") or 0)
    compact = _field(fields, "x")
    if compact is not None:
        went, _, repeats = compact.partition(b":")
        return int(went or 0), int(repeats or 0)
    return _event_count(body_of(_field(fields, "body") or b"")), 0


def made_delivery(fields: Fields) -> bool:
    """Whether the entry's post made a delivery (an event of it was not a repeat), without reading its body."""
    accepted = _field(fields, "accepted")
    if accepted is not None:
        return int(accepted or 0) > 0
    compact = _field(fields, "x")
    return compact is None or int(compact.partition(b":")[0] or 0) > 0


def _event_count(body: bytes) -> int:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return 0
    events = document.get("events") if isinstance(document, dict) else None
    return len(events) if isinstance(events, list) else 0


def _delivery_of(appid: str, entry_id: str, fields: dict[str, bytes]) -> str:
    """The delivery the entry made: named by the entry itself (svcgw.deliveryid), or in its ``delivery`` field."""
    if "delivery" in fields:
        return fields["delivery"].decode()
    return from_entry(appid, entry_id) if made_delivery(fields) else ""


def _state(state: bytes | None, appid: bytes | None) -> bytes | None:
    return state or (b"queued" if appid else None)


def _gone(delivery_id: str) -> str:
    """The state of a delivery with no record left: one named by its post is deleted only once delivered."""
    return "delivered" if parse(delivery_id) is not None else "unknown"


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")
