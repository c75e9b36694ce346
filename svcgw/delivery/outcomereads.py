"""Finding delivered deliveries' bare outcomes in their instance's containers (svcgw.delivery.outcomes).

The outcome of a post's delivery is in the instance's outcome stream, written
within :data:`~svcgw.delivery.outcomes.OUTCOME_WINDOW` of the post, or else in one of
the two live late hashes. :func:`find` reads the stream from the oldest post
asked for to the window after the newest, in chunks and at most
:data:`SCAN_LIMIT` entries (a reader never walks a day of outcomes: a backlog
so deep that more outcomes than that came in between leaves some unfound,
shown as delivered without attempts), then the late hashes for the rest.

A post's delivery to a further destination named by the post has its outcome
under the post's entry id and the destination's hex digits
(:func:`svcgw.deliveryid.outcome_key`: the stream entry's ``d``, the late
field's ``_<hex>``), so the primary's and each destination's are told apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from redis.asyncio import Redis

from svcgw.delivery.outcomes import OUTCOME_WINDOW, Outcome, late_buckets
from svcgw.deliveryid import entry_ms
from svcgw.storage.keys import KeySpace

__all__ = ["CLOCK_SKEW_MS", "SCAN_CHUNK", "SCAN_LIMIT", "find", "stream_outcome"]

SCAN_CHUNK = 500
# A post's time is its receiver's clock, an outcome's the Redis server's: read this much earlier.
CLOCK_SKEW_MS = 2000
SCAN_LIMIT = 20_000

Row = tuple[bytes | str, dict[bytes | str, bytes | str]]


async def find(
    redis: Redis, keys: KeySpace, appid: str, entry_ids: Sequence[str], *, now: float, retention: int
) -> dict[str, Outcome]:
    """The bare outcomes found of ``entry_ids`` (outcome keys: log entry ids, with ``_<hex>`` for a further
    destination's, :func:`svcgw.deliveryid.outcome_key`), by that key."""
    wanted = set(entry_ids)
    found: dict[str, Outcome] = {}
    if not wanted:
        return found
    start = str(max(min(entry_ms(entry) for entry in wanted) - CLOCK_SKEW_MS, 0))
    end = str(max(entry_ms(entry) for entry in wanted) + OUTCOME_WINDOW * 1000)
    read = 0
    while wanted and read < SCAN_LIMIT:
        rows = cast(list[Row], await redis.xrange(keys.outcomes(appid), start, end, count=SCAN_CHUNK))
        for _, fields in rows:
            entry, outcome = stream_outcome(fields)
            if entry in wanted:
                wanted.discard(entry)
                found[entry] = outcome
        read += len(rows)
        if len(rows) < SCAN_CHUNK:
            break
        start = "(" + _text(rows[-1][0])
    if wanted:
        late = sorted(wanted)
        async with redis.pipeline(transaction=False) as pipe:
            for bucket in late_buckets(now, retention):
                pipe.hmget(keys.late_outcomes(appid, bucket), late)
            replies = await pipe.execute()
        for values in replies:
            for entry, value in zip(late, values, strict=True):
                if value is not None and entry not in found:
                    found[entry] = Outcome.from_late(value)
    return found


def stream_outcome(fields: dict[bytes | str, bytes | str]) -> tuple[str, Outcome]:
    """The outcome key (the log entry id, then ``_`` and ``d`` for a further destination's) and the bare
    outcome of one entry of the outcome stream."""
    entry = _text(fields.get(b"l") or fields.get("l") or b"")
    if "-" not in entry:
        entry += "-0"  # written as its ms alone (queue_finish.lua)
    destination = fields.get(b"d") or fields.get("d")
    if destination:
        entry += "_" + _text(destination)
    ids = fields.get(b"i") or fields.get("i")
    return entry, Outcome(_text(fields.get(b"o") or fields.get("o") or b""), _bytes(ids) if ids else None)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")
