"""Delivery ids: the instance and its post's log entry id, ``<appid>-<ms>-<seq>``.

A customer post's delivery is named by the entry of the instance's callback
log that holds the post: the id needs no field of the log entry and gives,
alone, the instance (whose containers hold what is left of a delivered
delivery: ``svcgw.delivery.outcomereads``) and the time it was received. The id is
also RQ's job id and ``X-Svc-Delivery-Id``; RQ allows letters, digits, ``_``
and ``-`` in a job id, so an appid with any other character keeps the older
form, ``dlv_`` and 24 hex digits, as do service events and every delivery
written before this form existed. The two forms never meet: an id of the
older form holds no ``-``.

The receiver proposes the entry id (its clock's milliseconds and a sequence
number of its own, :class:`EntryClock`), since the script that writes the
delivery names its keys before it runs; the script refuses one that is not
above the log's last entry and answers with that entry's id, and the
receiver proposes again above it.

A post's delivery to a further destination (docs/destinations.md) is named by
the primary's id and the destination's: ``<appid>-<ms>-<seq>_<16 hex>``, the
hex digits being the destination id's (``dst_`` and 16 hex), so that the id
alone (an index entry, a dead letter, a claim) tells its instance, its post
and its destination (:func:`for_destination`, :func:`parse_destination`).
:func:`parse` stays exact for the primary's form: it answers None for one of
this form, as for a ``dlv_`` id; :func:`parse_named` takes either.
"""

from __future__ import annotations

import functools
import re
import secrets
import threading
import time

__all__ = [
    "EntryClock",
    "destination_of",
    "entry_ms",
    "for_destination",
    "from_entry",
    "new_delivery_id",
    "outcome_key",
    "parse",
    "parse_destination",
    "parse_named",
    "received_at",
    "takes_entry_ids",
]

_SAFE_APPID = re.compile(r"[A-Za-z0-9_-]{1,100}")
_ID = re.compile(r"([A-Za-z0-9_-]{1,100})-([0-9]{1,15})-([0-9]{1,15})")
_TO_DESTINATION = re.compile(r"([A-Za-z0-9_-]{1,100})-([0-9]{1,15})-([0-9]{1,15})_([0-9a-f]{16})")
_DESTINATION_ID = re.compile(r"dst_([0-9a-f]{16})")


def new_delivery_id() -> str:
    """An id of the older form, ``dlv_`` and 24 lowercase hex digits (service events'); also the RQ job id."""
    return "dlv_" + secrets.token_hex(12)


def takes_entry_ids(appid: str) -> bool:
    """Whether ``appid``'s deliveries are named by their log entries (its characters fit a job id)."""
    return _SAFE_APPID.fullmatch(appid) is not None


def from_entry(appid: str, entry_id: str) -> str:
    return f"{appid}-{entry_id}"


# A worker reads an attempt's id at its claim, its preparation and its finish: the same few thousand
# ids in flight, each read several times.
@functools.lru_cache(maxsize=8192)
def parse(delivery_id: str) -> tuple[str, str] | None:
    """``(appid, log entry id)`` of an id of this form; None for one of the older form (or none)."""
    match = _ID.fullmatch(delivery_id)
    if match is None:
        return None
    return match.group(1), f"{match.group(2)}-{match.group(3)}"


def for_destination(primary_id: str, destination_id: str) -> str | None:
    """The id of the post's delivery to a further destination, from the primary's id (of the post's form).

    None when either is of another form: the older ``dlv_`` form is used then.
    """
    match = _DESTINATION_ID.fullmatch(destination_id)
    if match is None or parse(primary_id) is None:
        return None
    return f"{primary_id}_{match.group(1)}"


@functools.lru_cache(maxsize=8192)
def parse_destination(delivery_id: str) -> tuple[str, str, str] | None:
    """``(appid, log entry id, destination id)`` of a further destination's delivery named by its post; else None."""
    match = _TO_DESTINATION.fullmatch(delivery_id)
    if match is None:
        return None
    return match.group(1), f"{match.group(2)}-{match.group(3)}", "dst_" + match.group(4)


# The engine asks several times for every delivery in flight.
@functools.lru_cache(maxsize=8192)
def parse_named(delivery_id: str) -> tuple[str, str, str | None] | None:
    """``(appid, log entry id, destination id or None)`` of any delivery named by its post; None for ``dlv_``."""
    named = parse(delivery_id)
    if named is not None:
        return named[0], named[1], None
    return parse_destination(delivery_id)


def destination_of(delivery_id: str, field: bytes | str | None = None) -> str | None:
    """The further destination a delivery goes to: its hash's ``destination`` field (a ``dlv_`` one), else the
    one its id names (named by its post, which keeps no such field); None for the primary address's."""
    if field:
        return field.decode("utf-8", "replace") if isinstance(field, bytes) else field
    named = parse_destination(delivery_id)
    return named[2] if named else None


def outcome_key(entry_id: str, destination_id: str | None) -> str:
    """How a delivered delivery's bare outcome is found (svcgw.delivery.outcomes): its post's log entry id, and
    for a further destination's, ``_`` and the destination id's 16 hex digits after it."""
    return entry_id if destination_id is None else f"{entry_id}_{destination_id.removeprefix('dst_')}"


def received_at(delivery_id: str) -> float | None:
    """When the post of a delivery named by it was received (its entry id's time); None for a ``dlv_`` id."""
    named = parse_named(delivery_id)
    return entry_ms(named[1]) / 1000 if named else None


def entry_ms(entry_id: str) -> int:
    """The milliseconds of a stream entry id (``<ms>-<seq>``)."""
    return int(entry_id.partition("-")[0])


class EntryClock:
    """Log entry ids to propose, rising within the process: the clock's ms, or after the last one seen."""

    def __init__(self) -> None:
        self._last = (0, 0)
        self._lock = threading.Lock()

    def propose(self, now: float | None = None) -> str:
        ms = int((time.time() if now is None else now) * 1000)
        with self._lock:
            last_ms, last_seq = self._last
            proposed = (ms, 0) if ms > last_ms else (last_ms, last_seq + 1)
            self._last = proposed
        return f"{proposed[0]}-{proposed[1]}"

    def seen(self, entry_id: str) -> None:
        """The log held ``entry_id`` already: propose above it from now on."""
        ms, _, seq = entry_id.partition("-")
        with self._lock:
            self._last = max(self._last, (int(ms), int(seq)))
