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
"""

from __future__ import annotations

import re
import secrets
import threading
import time

__all__ = ["EntryClock", "entry_ms", "from_entry", "new_delivery_id", "parse", "received_at", "takes_entry_ids"]

_SAFE_APPID = re.compile(r"[A-Za-z0-9_-]{1,100}")
_ID = re.compile(r"([A-Za-z0-9_-]{1,100})-([0-9]{1,15})-([0-9]{1,15})")


def new_delivery_id() -> str:
    """An id of the older form, ``dlv_`` and 24 lowercase hex digits (service events'); also the RQ job id."""
    return "dlv_" + secrets.token_hex(12)


def takes_entry_ids(appid: str) -> bool:
    """Whether ``appid``'s deliveries are named by their log entries (its characters fit a job id)."""
    return _SAFE_APPID.fullmatch(appid) is not None


def from_entry(appid: str, entry_id: str) -> str:
    return f"{appid}-{entry_id}"


def parse(delivery_id: str) -> tuple[str, str] | None:
    """``(appid, log entry id)`` of an id of this form; None for one of the older form (or none)."""
    match = _ID.fullmatch(delivery_id)
    if match is None:
        return None
    return match.group(1), f"{match.group(2)}-{match.group(3)}"


def received_at(delivery_id: str) -> float | None:
    """When the post of a delivery named by it was received (its entry id's time); None for a ``dlv_`` id."""
    named = parse(delivery_id)
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
