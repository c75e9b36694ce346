"""An instance's callback log read as its deliveries: what the log-page reader and the by-id reader share.

A post's log entry names the delivery it made (``svcgw.deliveryid``), and those of its further
destinations in its field ``f`` (:func:`svcgw.delivery.view.fanned_out`). A delivered delivery named
by its post has no record left, only its post and a bare outcome (:mod:`svcgw.delivery.outcomes`):
:class:`Posts` shows it from those. :func:`complete` gives the deliveries read from their records
their attempts and event ids. The readers are :mod:`svcgw.delivery.listing` (a page of an
instance's deliveries) and :mod:`svcgw.delivery.byid` (deliveries by id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from redis.asyncio import Redis

from svcgw import deliveryid
from svcgw.delivery import attemptrecords, outcomereads
from svcgw.delivery.outcomes import Outcome
from svcgw.delivery.outcomes import delivered as delivered_outcome
from svcgw.delivery.view import Delivery, attempt_of, fanned_out, field_text, ids_of
from svcgw.intake.calllog import body_of, made_delivery
from svcgw.storage.keys import KeySpace

__all__ = ["FIELDS", "ID_FIELDS", "PRIMARY", "Item", "Posts", "as_bytes", "complete"]

# The delivery hash fields the list reads (the body only when it needs the event ids).
FIELDS = (
    "appid", "account", "event_type", "state", "received_at", "next_at", "delivered_at", "dead_at", "destination",
)  # fmt: skip
# Where the event ids are: the body, or, once delivered, the list kept instead of it (stored_ids).
ID_FIELDS = ("body", "ids")
# The destination filter's value for the primary address's deliveries alone.
PRIMARY = "primary"


class Item(NamedTuple):
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


class Posts:
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
        self.bodies[entry_id] = as_bytes(fields.get(b"body", fields.get("body", b"")))
        return deliveryid.from_entry(self.appid, entry_id)

    def items_of(self, entry_id: str, fields: Mapping[bytes | str, bytes | str], destination: str | None) -> list[Item]:
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
            Item(delivery_id, entry_id, target, place, n < len(kept) - 1)
            for n, (place, delivery_id, target) in enumerate(kept)
        ]

    def bare(self, item: Item, record: Mapping[str, bytes | str | None]) -> bool:
        """Whether the delivery is delivered with only its bare outcome left (no record, named by its post)."""
        return (
            item.entry_id in self.bodies
            and not record.get("appid")
            and deliveryid.parse_named(item.delivery_id) is not None
        )

    async def outcomes(self, redis: Redis, keys: KeySpace, outcome_keys: Sequence[str]) -> dict[str, Outcome]:
        """The bare outcomes found, by :attr:`Item.outcome_key`."""
        return await outcomereads.find(redis, keys, self.appid, outcome_keys, now=self.now, retention=self.retention)

    def delivered(self, item: Item, outcome: Outcome | None) -> Delivery:
        body = body_of(self.bodies[item.entry_id])
        shown = delivered_outcome(item.delivery_id, self.appid, self.account, item.entry_id, body, outcome)
        return replace(shown, destination=item.destination) if item.destination else shown


async def complete(
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
            wanted = [*names, *([] if bodies_read else ID_FIELDS)]
            pipe.hmget(keys.delivery(delivery.id), wanted or [attemptrecords.COUNT])  # HMGET needs a field
        replies = iter(await pipe.execute())
    for index, delivery in enumerate(found):
        count = counts.get(delivery.id, 0)
        legacy, values = next(replies), next(replies)
        if not legacy and all(value is None for value in values):
            gone.add(delivery.id)
        records = attemptrecords.merged(count, values[:count], legacy)
        ids = delivery.event_ids if bodies_read else ids_of(dict(zip(ID_FIELDS, values[count:], strict=True)))
        attempts = tuple(attempt_of(record, number + 1) for number, record in enumerate(records))
        found[index] = replace(delivery, attempts=attempts, event_ids=ids)
    return gone


def as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")
