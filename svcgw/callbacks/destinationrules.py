"""What a further destination may hold: its event types, rate limit and label, and how many a scope has.

Further destinations (``docs/destinations.md``) are callback addresses beside
the primary one, on an account (for all its instances) or on one instance.
Their address is checked by the address rules (:mod:`svcgw.callbacks.addresses`),
as the primary's is; their other values by the pure checks here, which the
store, the console and the command line share:

* **event types**: a list of plain event type names (a letter, then letters,
  digits or ``_``; at most :data:`MAX_EVENT_TYPE_LENGTH` characters, at most
  :data:`MAX_EVENT_TYPES` names, repeats dropped, order kept). Empty means
  every event type. The names the spec lists are :data:`KNOWN_EVENT_TYPES`;
  others are accepted, since the capability layer may send types the spec
  does not list yet, but a known name in other letter case (``msg``) is
  refused with the right spelling, as it would never match, and so is
  ``SvcCallbackTest``, which is never delivered as an event;
* **rate limit**: deliveries per second, more than 0 and at most
  :data:`MAX_RATE`, fractions allowed (``0.5`` is one every two seconds), or
  None for no limit;
* **label**: free text for people, at most :data:`MAX_LABEL_LENGTH`
  characters, without control characters;
* **Bearer token** (a further destination's, and the primary address's, which
  shares the rule): no control characters (CR, LF, NUL, ...), which no HTTP
  header may carry, so that a token that can never be sent is refused when
  it is saved rather than failing every delivery;
* **how many**: at most :data:`MAX_DESTINATIONS` on one account, and as many
  on each instance.

Errors (in the one tree of ``svcgw.errors``)::

    Rejected
    └── DestinationRejected     (also ValueError) ``kind`` is its row of the error table
        ├── BadEventTypes       -40020 (400)
        ├── BadRate             -40021 (400)
        ├── BadLabel            -40000 (400)
        ├── BadToken            -40022 (400)
        └── TooManyDestinations -40920 (409)
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable

from svcgw import errors
from svcgw.errors import ErrorKind, Rejected

__all__ = [
    "DESTINATION_ID",
    "KNOWN_EVENT_TYPES",
    "MAX_DESTINATIONS",
    "MAX_EVENT_TYPES",
    "MAX_EVENT_TYPE_LENGTH",
    "MAX_LABEL_LENGTH",
    "MAX_RATE",
    "BadEventTypes",
    "BadLabel",
    "BadRate",
    "BadToken",
    "DestinationRejected",
    "TooManyDestinations",
    "check_bearer_token",
    "check_event_types",
    "check_label",
    "check_rate",
    "is_destination_id",
    "split_event_types",
]

MAX_DESTINATIONS = 10
MAX_EVENT_TYPES = 20
MAX_EVENT_TYPE_LENGTH = 64
MAX_RATE = 1000.0
MAX_LABEL_LENGTH = 100

# The event_type values of the spec's table ("event_type values"), service events included.
KNOWN_EVENT_TYPES: tuple[str, ...] = (
    "Msg",
    "GapConnected",
    "GapSucceed",
    "GapClosed",
    "BigFileUploadCompleted",
    "BigFileUploadFailed",
    "Error",
    "InstanceOffline",
    "InstanceRecovered",
)
_TEST_EVENT_TYPE = "SvcCallbackTest"  # svcgw.callbacks.testpost.TEST_EVENT_TYPE: sent only as a test
_BY_LOWER = {name.lower(): name for name in (*KNOWN_EVENT_TYPES, _TEST_EVENT_TYPE)}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

# ``dst_`` and 16 hex digits (svcgw.registry.base.new_id): anything else names no destination.
DESTINATION_ID = re.compile(r"dst_[0-9a-f]{16}")


class DestinationRejected(Rejected, ValueError):
    """A value a further destination cannot hold; ``kind`` is the error table's row, the message says why."""

    kind: ErrorKind = errors.BAD_REQUEST

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadEventTypes(DestinationRejected):
    kind = errors.BAD_EVENT_TYPES


class BadRate(DestinationRejected):
    kind = errors.BAD_RATE


class BadLabel(DestinationRejected):
    kind = errors.BAD_REQUEST


class BadToken(DestinationRejected):
    kind = errors.BAD_TOKEN


class TooManyDestinations(DestinationRejected):
    kind = errors.TOO_MANY_DESTINATIONS


def is_destination_id(value: str) -> bool:
    return DESTINATION_ID.fullmatch(value) is not None


def split_event_types(text: str) -> list[str]:
    """``"Msg, InstanceOffline"`` as a list (commas or spaces between names); ``""`` is the empty list."""
    return [part for part in re.split(r"[\s,]+", text) if part]


def check_event_types(names: Iterable[object]) -> tuple[str, ...]:
    """The event types a filter keeps, checked (see the module docstring); empty: every event type."""
    kept: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise BadEventTypes("event_types must be a list of event type names")
        name = name.strip()
        if not name:
            continue
        shown = name[:MAX_EVENT_TYPE_LENGTH]
        if len(name) > MAX_EVENT_TYPE_LENGTH:
            raise BadEventTypes(f"event type {shown!r}... is longer than {MAX_EVENT_TYPE_LENGTH} characters")
        if not _NAME.fullmatch(name):
            raise BadEventTypes(
                f"{shown!r} is not an event type name: a letter, then letters, digits or _ (such as Msg)"
            )
        if name == _TEST_EVENT_TYPE:
            raise BadEventTypes(f"{_TEST_EVENT_TYPE} is sent only as a test, when a destination is saved")
        known = _BY_LOWER.get(name.lower())
        if known is not None and known != name:
            raise BadEventTypes(f"{name!r} is spelled {known!r} (event types are case-sensitive)")
        if name not in kept:
            kept.append(name)
    if len(kept) > MAX_EVENT_TYPES:
        raise BadEventTypes(f"at most {MAX_EVENT_TYPES} event types per destination, not {len(kept)}")
    return tuple(kept)


def check_rate(value: object) -> float | None:
    """Deliveries per second as a number (a numeric text too), or None for no limit."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadRate("rate must be a number of deliveries per second, or null for no limit")
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none"):
            return None
        try:
            value = float(text)
        except ValueError:
            raise BadRate(f"rate {text[:40]!r} is not a number of deliveries per second") from None
    if not isinstance(value, int | float):
        raise BadRate("rate must be a number of deliveries per second, or null for no limit")
    rate = float(value)
    if not math.isfinite(rate) or rate <= 0:
        raise BadRate("rate must be more than 0 deliveries per second (leave it out for no limit)")
    if rate > MAX_RATE:
        raise BadRate(f"rate must be at most {MAX_RATE:g} deliveries per second")
    return rate


def check_label(value: object) -> str:
    """A label for people: stripped, at most :data:`MAX_LABEL_LENGTH` characters, no control characters."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadLabel("label must be a string")
    label = value.strip()
    if len(label) > MAX_LABEL_LENGTH:
        raise BadLabel(f"label is longer than {MAX_LABEL_LENGTH} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in label):
        raise BadLabel("label must not contain control or invisible characters")
    return label


def check_bearer_token(value: str | None) -> str | None:
    """A Bearer token as given (None or empty: none given), refused with control characters in it.

    The message never shows the token, only which character it holds.
    """
    if not value:
        return value
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            raise BadToken(f"a Bearer token must not contain control characters; it holds U+{ord(ch):04X}")
    return value
