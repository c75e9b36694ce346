"""One further destination's deliveries, newest first, read from its index on every shard.

Each delivery to a further destination (``docs/destinations.md``) has an
entry in the destination's index on the instance's shard,
``KeySpace.destination_deliveries(dst_id)``: a stream, written by the ingest
script with the delivery (Redis's time, field ``d``: the primary's id for a
delivery named by its post, whose own id follows from it and the
destination's, :func:`svcgw.deliveryid.for_destination`; else the ``dlv_``
id), ``MINID``-trimmed to the log's retention. An instance's destination has
its index on that instance's shard alone; an account's, on every shard that
holds one of its instances, so its page merges the shards' (``clients`` are
the shards' clients, shard 0's first, as in :mod:`svcgw.shards.routing`).

A page's cursor is ``<entry id>:<delivery id>`` of the last delivery shown:
entries are ordered by (entry id, delivery id), descending, on every shard,
so a page never repeats nor skips one even where two shards' entries have
the same id. The deliveries themselves are read as the instance's list
reads them (:func:`svcgw.delivery.byid.deliveries_of`: a delivered one
named by its post from its post and bare outcome); one whose record or post
expired is left out.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from typing import cast

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery.byid import deliveries_of
from svcgw.delivery.listing import MAX_LIMIT, Delivery, Page
from svcgw.delivery.view import field_text
from svcgw.errors import Invalid
from svcgw.shards.clients import ShardRedis
from svcgw.shards.routing import instance_shard

__all__ = ["cursor", "list_destination_deliveries", "parse_cursor"]

_CURSOR = re.compile(r"([0-9]{1,16})-([0-9]{1,16}):([A-Za-z0-9_-]{1,200})")

# One index entry: (its stream id's ms, its sequence, the delivery id), ordered newest first, descending.
Entry = tuple[int, int, str]


def parse_cursor(before: str) -> Entry:
    match = _CURSOR.fullmatch(before)
    if match is None:
        raise Invalid("before must be the next_before of a previous page")
    return int(match.group(1)), int(match.group(2)), match.group(3)


def cursor(entry: Entry) -> str:
    return f"{entry[0]}-{entry[1]}:{entry[2]}"


def delivery_of(value: bytes | str, destination_id: str) -> str:
    """The delivery id an index entry's ``d`` names: the primary's id gives the destination's named by the post."""
    text = field_text(value)
    return deliveryid.for_destination(text, destination_id) or text


async def list_destination_deliveries(
    clients: Sequence[ShardRedis],
    settings: Settings,
    destination_id: str,
    *,
    appid: str | None = None,
    account: str | None = None,
    limit: int = 50,
    before: str | None = None,
    now: float | None = None,
) -> Page:
    """One page of the destination's deliveries of the log's retention, newest first, with their attempts.

    ``appid``: the destination's instance, for an instance's destination (its shard alone is read);
    None for an account's (every shard). With ``account``, another account's deliveries are left out.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid(f"limit must be from 1 to {MAX_LIMIT}")
    after = parse_cursor(before) if before else None
    oldest = int(((time.time() if now is None else now) - settings.log_retention) * 1000)
    shards = [await instance_shard(clients, appid)] if appid is not None else list(clients)
    # Each shard's first ``limit + 1`` below the cursor hold the merged page and whether there is more.
    heads = await asyncio.gather(*(_below(shard, destination_id, after, oldest, limit + 1) for shard in shards))
    merged = sorted(((entry, index) for index, head in enumerate(heads) for entry in head), reverse=True)
    page, more = merged[:limit], len(merged) > limit
    found: dict[str, Delivery] = {}
    for index, shard in enumerate(shards):
        ids = [entry[2] for entry, at in page if at == index]
        for delivery in await deliveries_of(shard.redis, shard.keys, settings, ids, account=account):
            found[delivery.id] = delivery
    shown = [found[entry[2]] for entry, _ in page if entry[2] in found]
    return Page(shown, cursor(page[-1][0]) if more and page else None, len(page))


async def _below(shard: ShardRedis, destination_id: str, after: Entry | None, oldest: int, count: int) -> list[Entry]:
    """The shard's first ``count`` entries of the index below ``after`` (all for None), not older than ``oldest``."""
    key = shard.keys.destination_deliveries(destination_id)
    # The entry of the cursor's own id (on this shard, at most one) is below it when its delivery id is.
    top = f"{after[0]}-{after[1]}" if after is not None else "+"
    rows = cast(
        list[tuple[bytes | str, dict[bytes | str, bytes | str]]],
        await shard.redis.xrevrange(key, top, str(max(oldest, 0)), count=count + 1),
    )
    entries: list[Entry] = []
    for entry_id, fields in rows:
        ms, _, seq = field_text(entry_id).partition("-")
        value = fields.get(b"d", fields.get("d"))
        if value:
            entries.append((int(ms), int(seq or 0), delivery_of(value, destination_id)))
    if after is not None:
        entries = [entry for entry in entries if entry < after]
    return entries[:count]
