"""What is kept of a delivered delivery: its bare outcome, read back as a :class:`Delivery` (pure, no Redis).

Once a delivery is delivered its records are deleted (``queue_finish.lua``)
and its instance keeps, for the log's retention, one bare outcome: per
attempt ``<t>:<s>:<d>``, ``,``-separated, where ``t`` is the attempt's time
in ms after the post was received (the log entry's ms), ``s`` the HTTP
status or a short error class (``timeout``, ``refused``, ``tls``, ``dns``,
``reset``, ``other``), ``d`` its duration in ms. The destination and the
answers are not kept: only deliveries that did not succeed keep them.

It goes to the instance's outcome stream (``keys.outcomes``; field ``l`` the
log entry id, its ms alone when its sequence is 0, ``d`` the destination id's 16 hex digits for a further
destination's delivery named by its post (none for the primary's), ``o`` the outcome, ``i`` the event ids
when the post had duplicates, so that its log entry does not say which events went) when the
delivery ends within :data:`OUTCOME_WINDOW` of its post, and to the late hash
of the current bucket otherwise (``keys.late_outcomes``, field the log entry
id, with ``_<hex>`` for a further destination's, value the outcome, then
``\\n`` and the ids when kept), so that a reader
finds an outcome by reading the stream only from a page's oldest post to
:data:`OUTCOME_WINDOW` after its newest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from svcgw.delivery.view import AttemptRecord, Delivery, event_ids
from svcgw.deliveryid import entry_ms

__all__ = [
    "ANSWERS_NOTE",
    "OUTCOME_WINDOW",
    "Outcome",
    "attempts_of",
    "delivered",
    "late_bucket",
    "late_buckets",
    "late_expire_at",
    "post_type",
]

# What the CLI and the console say under a delivered delivery's attempts.
ANSWERS_NOTE = (
    "Answers and destinations are kept only for deliveries that did not succeed: "
    "a delivered delivery keeps each attempt's time, outcome and duration."
)

# Seconds after its post within which a delivered delivery's outcome goes to the stream.
OUTCOME_WINDOW = 60


@dataclass(frozen=True)
class Outcome:
    """A bare outcome as stored: the attempts' text, and the event ids when the post had duplicates."""

    attempts: str
    ids: bytes | None = None

    @classmethod
    def from_late(cls, value: bytes | str) -> Outcome:
        raw = value if isinstance(value, bytes) else value.encode("utf-8")
        text, _, ids = raw.partition(b"\n")
        return cls(text.decode("utf-8", "replace"), ids or None)


def late_bucket(now: float, retention: int) -> int:
    """The late hash an outcome finished at ``now`` goes to: one per ``retention`` seconds."""
    return int(now // max(retention, 1))


def late_buckets(now: float, retention: int) -> tuple[int, int]:
    """The buckets that hold every late outcome of a post still in the log: this one and the one before."""
    bucket = late_bucket(now, retention)
    return bucket, bucket - 1


def late_expire_at(bucket: int, retention: int) -> int:
    """When a bucket expires: an outcome written into it at t is kept at least until t + ``retention``."""
    return (bucket + 2) * max(retention, 1)


def attempts_of(received_ms: int, text: str) -> tuple[AttemptRecord, ...]:
    """The attempts of a bare outcome; a part that cannot be read is shown as unreadable."""
    attempts: list[AttemptRecord] = []
    for number, part in enumerate(filter(None, text.split(",")), 1):
        pieces = part.split(":")
        if len(pieces) != 3 or not _is_int(pieces[0]) or not _is_int(pieces[2]):
            attempts.append(AttemptRecord(number, None, False, None, "unreadable attempt record", None, "", None))
            continue
        offset, kind, duration = pieces
        status = int(kind) if kind.isdigit() else None
        ok = status is not None and 200 <= status < 300
        attempts.append(
            AttemptRecord(
                number=number,
                at=(received_ms + int(offset)) / 1000,
                ok=ok,
                status=status,
                error=None if status is not None else kind,
                duration_ms=float(duration),
                response="",
                destination=None,
            )
        )
    return tuple(attempts)


def post_type(body: bytes) -> str:
    """The ``event_type`` of a post as the log keeps it ('' if unreadable)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    value = document.get("event_type") if isinstance(document, dict) else None
    return value if isinstance(value, str) else ""


def delivered(
    delivery_id: str,
    appid: str,
    account: str,
    entry_id: str,
    body: bytes,
    outcome: Outcome | None,
) -> Delivery:
    """A delivered delivery from its post (the log entry's body, as received) and its bare outcome.

    Without an outcome (not found where it should be) it is still shown as
    delivered, with no attempts: nothing but a delivery deletes its records.
    """
    received_ms = entry_ms(entry_id)
    attempts: Sequence[AttemptRecord] = attempts_of(received_ms, outcome.attempts) if outcome else ()
    ids = event_ids(body)
    if outcome is not None and outcome.ids is not None:
        try:
            listed = orjson.loads(outcome.ids)
        except orjson.JSONDecodeError:
            listed = []
        ids = tuple(str(value) for value in listed) if isinstance(listed, list) else ()
    last = attempts[-1] if attempts else None
    finished = last.at + (last.duration_ms or 0) / 1000 if last is not None and last.at is not None else None
    return Delivery(
        id=delivery_id,
        appid=appid,
        account=account,
        event_type=post_type(body),
        event_ids=ids,
        state="delivered",
        received_at=received_ms / 1000,
        next_attempt_at=None,
        delivered_at=finished,
        dead_at=None,
        attempts=tuple(attempts),
    )


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()
