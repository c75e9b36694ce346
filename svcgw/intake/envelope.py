"""Callback envelopes: reading a receiver post and building the forward body.

A post is ``{"event_type": ..., "events": [...]}`` with an optional ``appid``.
The bytes of every event are kept exactly as received: the forward body is
assembled from the original byte spans, never re-serialized, so a 19-digit
integer or ``1e2`` reaches the customer as it arrived.

De-duplication keys:

* an event with an ``id`` (string or integer) is keyed by that id, taken from
  its raw text so that integers above 2**53 stay exact;
* an event without one (``GapClosed``, for example) has no key and is never
  dropped: two identical ones may be two real occurrences, and the spec
  leaves their de-duplication to the receiver, by a business key of its own.

A post is strict UTF-8 (not UTF-16 or UTF-32, no byte order mark, no
escaped lone surrogate such as ``"\\ud800"``): 400. Its ``event_type``
travels on as an HTTP header of the delivery, so it must be printable
ASCII (0x20 to 0x7E): anything else, CR and LF included, is 422.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from svcgw.errors import Rejected
from svcgw.intake import rawjson

__all__ = ["EnvelopeError", "Post", "RawEvent", "build_envelope", "parse_post"]

# An event's key: this, then 40 hex digits of its id's SHA-256.
_KEY_PREFIX = "id:"


class EnvelopeError(Rejected, ValueError):
    """A receiver post that cannot be accepted; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RawEvent:
    """One event's bytes as received, and its de-duplication key (None: never de-duplicated)."""

    raw: bytes
    key: str | None

    @property
    def keyed(self) -> bool:
        return self.key is not None

    @property
    def digest(self) -> bytes | None:
        """The de-duplication window's field for this event (svcgw.intake.dedup): 16 raw bytes.

        The first half of the SHA-256 the key already spells in hex, so no second hash is taken.
        128 bits: among n ids of one instance in one window, two collide with odds of about
        n² / 2¹²⁹, below 10⁻²⁰ for a billion ids; a collision would drop one event as a duplicate.
        """
        return None if self.key is None else bytes.fromhex(self.key[len(_KEY_PREFIX) : len(_KEY_PREFIX) + 32])


@dataclass(frozen=True)
class Post:
    appid: str | None
    event_type: str
    events: tuple[RawEvent, ...]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_NOT_UTF8 = "the body is not UTF-8 JSON"
_EVENT_TYPE = re.compile(r"[\x20-\x7e]+")


def _loads(body: bytes) -> Any:
    """The parsed body; orjson takes strict UTF-8 only, so most bodies stop at the first try."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    # orjson refuses numbers beyond a double's range (1e400), which JSON allows;
    # the raw bytes are forwarded, so the parsed value only has to exist. The
    # standard library is lenient where orjson is not (it guesses UTF-16 and
    # UTF-32, skips a byte order mark, keeps lone surrogates), so those are
    # refused here: the spans below are UTF-8 offsets, and every string must
    # encode back.
    if body.startswith(b"\xef\xbb\xbf"):
        raise EnvelopeError(_NOT_UTF8 + ": it starts with a byte order mark")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise EnvelopeError(_NOT_UTF8) from None
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise EnvelopeError("the body is not valid JSON") from None
    if rawjson.lone_surrogate(document, body):
        raise EnvelopeError(_NOT_UTF8 + ": a string holds a lone surrogate")
    return document


def parse_post(body: bytes, *, max_bytes: int, max_events: int | None = None) -> Post:
    if len(body) > max_bytes:
        raise EnvelopeError(f"the body is larger than {max_bytes} bytes", status=413)
    document = _loads(body)
    if not isinstance(document, dict):
        raise EnvelopeError("the body must be a JSON object")
    event_type = document.get("event_type")
    if not isinstance(event_type, str) or not event_type:
        raise EnvelopeError("event_type must be a non-empty string", status=422)
    if not _EVENT_TYPE.fullmatch(event_type):
        # It becomes the X-Svc-Event-Type header of the delivery: CR or LF there is undeliverable.
        raise EnvelopeError(
            "event_type must be printable ASCII (0x20 to 0x7E), without control characters", status=422
        )
    events = document.get("events")
    if not isinstance(events, list):
        raise EnvelopeError("events must be an array", status=422)
    if max_events is not None and len(events) > max_events:
        # Checked before the per-event work, which is what costs time.
        raise EnvelopeError(f"too many events in one post: {len(events)}, at most {max_events}", status=413)
    if not all(isinstance(event, dict) for event in events):
        raise EnvelopeError("every item of events must be an object", status=422)
    appid = document.get("appid")
    if appid is not None and not isinstance(appid, str):
        raise EnvelopeError("appid must be a string", status=422)

    # The parsed document said what is there; the spans say where its bytes are.
    span = _last(rawjson.members(body, rawjson.skip_ws(body, 0)), "events")
    assert span is not None
    raws = rawjson.items(body, *span)
    parsed = tuple(_raw_event(raw) for raw in raws)
    return Post(appid=appid, event_type=event_type, events=parsed)


def build_envelope(appid: str, event_type: str, raw_events: list[bytes] | tuple[bytes, ...]) -> bytes:
    return b"".join(
        (
            b'{"appid":',
            orjson.dumps(appid),
            b',"event_type":',
            orjson.dumps(event_type),
            b',"events":[',
            b",".join(raw_events),
            b"]}",
        )
    )


def _last(members: list[rawjson.Member], name: str) -> tuple[int, int] | None:
    """The span of the member called ``name`` that parsing keeps: the last one."""
    for member in reversed(members):
        if member.name == name:
            return member.start, member.end
    return None


def _raw_event(raw: bytes) -> RawEvent:
    span = _last(rawjson.members(raw, 0), "id")
    if span is not None:
        text = raw[span[0] : span[1]]
        if text[:1] == b'"':
            value = orjson.loads(text)
            if value:
                return RawEvent(raw, _KEY_PREFIX + hashlib.sha256(value.encode()).hexdigest()[:40])
        elif text[:1] in b"-0123456789":
            return RawEvent(raw, "id:" + hashlib.sha256(text).hexdigest()[:40])
    return RawEvent(raw, None)
