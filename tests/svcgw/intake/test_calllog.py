"""The callback log: raw bodies, newest first, paging, time windows and delivery states."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery import byid
from svcgw.errors import NotFound
from svcgw.intake import calllog
from svcgw.intake.calllog import COMPRESS_FROM, LogEntry, body_of, parse_since, stored_body
from svcgw.intake.calllog import read_log as read
from svcgw.intake.ingest import Ingest
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, provision
from tests.svcgw.delivery.test_deadletters import ingest


def read_log(settings: Settings, appid: str, **kwargs: Any) -> list[LogEntry]:
    """The log read in an event loop of its own, through a client that keeps bytes."""

    async def run() -> list[LogEntry]:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await read(client, keys, settings, appid, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45s", 45), ("30m", 1800), ("1h", 3600), ("2d", 172800), (" 1H ", 3600), ("90m", 5400)],
)
def test_parse_since(text: str, seconds: int) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "1.5h", "-1h", "0s", "1h30m", "one hour"])
def test_parse_since_refuses_with_a_readable_message(text: str) -> None:
    with pytest.raises(ValueError, match=r"45s, 30m, 1h or 2d|longer than zero"):
        parse_since(text)


def test_entries_are_raw_and_newest_first(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    bodies = [
        b'{"event_type":"Msg","events":[{"id":1688850000000000001,"roomId":12345678901234567890}]}',
        b'{ "event_type" : "Msg", "events" : [ {"id":"b", "v": 1e2} ] }',
        b'{"event_type":"Msg","events":[{"id":"b"}]}',
    ]
    delivery_ids = [ingest(settings, tenant, body) for body in bodies[:2]]

    async def post_duplicate() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            result = await Ingest(client, keys, settings).accept(tenant.appid, tenant.receiver_token, bodies[2])
        finally:
            await client.aclose()
        assert result.delivery_id is None and result.duplicates == 1

    asyncio.run(post_duplicate())

    entries = read_log(settings, tenant.appid)
    assert [e.body for e in entries] == bodies[::-1]
    newest, middle, oldest = entries
    assert (newest.accepted, newest.duplicates, newest.delivery_id, newest.state) == (0, 1, None, None)
    assert (middle.delivery_id, middle.state, middle.accepted) == (delivery_ids[1], "queued", 1)
    assert oldest.delivery_id == delivery_ids[0]
    assert oldest.received_at <= middle.received_at <= newest.received_at

    # Paging back from an entry, exclusive.
    assert [e.id for e in read_log(settings, tenant.appid, limit=1)] == [newest.id]
    assert [e.id for e in read_log(settings, tenant.appid, before=newest.id)] == [middle.id, oldest.id]

    # A delivery named by its post has no record left only once delivered (svcgw.delivery.outcomes);
    # a changed one shows its current state.
    redis.delete(keys.delivery(delivery_ids[0]))
    redis.hset(keys.delivery(delivery_ids[1]), "state", "retrying")
    states = [e.state for e in read_log(settings, tenant.appid)]
    assert states == [None, "retrying", "delivered"]
    # An entry of an earlier version names its delivery; one whose record expired is 'unknown'.
    stream = keys.callback_log(tenant.appid)
    redis.xadd(stream, {"body": b"{}", "received_at": "1", "delivery": "dlv_gone", "accepted": 1, "duplicates": 0})
    assert [(e.delivery_id, e.state) for e in read_log(settings, tenant.appid, limit=1)] == [("dlv_gone", "unknown")]

    as_json = middle.as_dict()
    assert as_json["body"] == bodies[1].decode() and as_json["delivery_id"] == delivery_ids[1]


def test_since_keeps_only_the_recent_stretch(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    stream = keys.callback_log(tenant.appid)
    two_hours_ago = int((time.time() - 7200) * 1000)
    redis.xadd(
        stream,
        {"body": b"{}", "received_at": two_hours_ago / 1000, "delivery": "", "accepted": 0, "duplicates": 0},
        id=f"{two_hours_ago}-0",
    )
    ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"recent"}]}')

    assert len(read_log(settings, tenant.appid)) == 2
    recent = read_log(settings, tenant.appid, since_seconds=parse_since("1h"))
    assert [e.body for e in recent] == [b'{"event_type":"Msg","events":[{"id":"recent"}]}']
    assert len(read_log(settings, tenant.appid, since_seconds=parse_since("3h"))) == 2
    assert read_log(settings, "we_nobody") == []


def test_a_large_post_is_kept_compressed_and_read_back_byte_for_byte(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    text = "会议改到周四下午三点 " * 40
    event = '{"id":"big","roomId":1688850000000000123,"content":"' + text + '"}'
    large = ('{"event_type":"Msg","events":[' + event + "]}").encode()
    small = b'{"event_type":"Msg","events":[{"id":"small","roomId":1688850000000000123}]}'
    for body in (large, small):
        ingest(settings, tenant, body)
    stored = [fields[b"body"] for _, fields in redis.xrange(keys.callback_log(tenant.appid))]
    assert stored[0].startswith(b"x") and len(stored[0]) < len(large) // 2
    assert stored[1] == small
    assert [entry.body for entry in read_log(settings, tenant.appid)] == [small, large]


def test_only_what_pays_is_compressed() -> None:
    assert stored_body(b" " * (COMPRESS_FROM - 1)) == b" " * (COMPRESS_FROM - 1)
    random_text = b'{"k":"' + os.urandom(600).hex().encode() + b'"}'  # hex digits: about half of it saved
    assert body_of(stored_body(random_text)) == random_text
    noise = b"{" + os.urandom(600)  # nothing to save: kept as it is (a post is JSON; the rule is not)
    assert stored_body(noise) == noise and body_of(noise) == noise
    assert body_of(b'{"x":1}') == b'{"x":1}' and body_of(b' {"x":1}') == b' {"x":1}'


def test_entries_of_both_forms_read_alike() -> None:
    post = b'{"event_type":"Msg","events":[{"id":"a"},{"id":"b"}]}'
    older = {b"body": post, b"received_at": b"1000.25", b"delivery": b"dlv_x", b"accepted": b"1", b"duplicates": b"1"}
    assert (calllog.received_at("1000250-0", older), calllog.counts(older)) == (1000.25, (1, 1))
    # Named by its delivery: the time is the id's, the counts are the post's unless written.
    assert (calllog.received_at("1000250-3", {b"body": post}), calllog.counts({b"body": post})) == (1000.25, (2, 0))
    assert calllog.counts({b"body": post, b"x": b"1:1"}) == (1, 1)
    assert calllog.made_delivery({b"body": post}) and calllog.made_delivery(older)
    assert not calllog.made_delivery({b"body": post, b"x": b"0:2"})
    assert not calllog.made_delivery({"accepted": b"0", "duplicates": b"2"})


# --- the retention: what Redis holds, and what a reader shows ----------------------------------
DAY = 86400


def post_every(url: str, settings: Settings, tenant: Tenant, interval: float, count: int, body: Any,
               *, ends_at: float, after: Any = None) -> None:  # fmt: skip
    """``count`` posts through the receiver's ingest, ``interval`` apart on its clock, the last at ``ends_at``.

    ``body(n)`` is the n-th post; ``after(now)`` runs after each one, at the receiver's time of it.
    """

    async def run() -> None:
        clock = {"now": 0.0}
        client = AsyncRedis.from_url(url)
        ingest = Ingest(client, keys, settings, clock=lambda: clock["now"])
        try:
            for n in range(count):
                clock["now"] = ends_at - (count - 1 - n) * interval
                await ingest.accept(tenant.appid, tenant.receiver_token, body(n))
                if after is not None:
                    await after(client, clock["now"])
        finally:
            await ingest.aclose()
            await client.aclose()

    asyncio.run(run())


def small_post(n: int) -> bytes:
    return b'{"event_type":"Msg","events":[{"id":"p-%06d","roomId":1688850000000000123}]}' % n


def test_a_reader_shows_only_the_retention_though_redis_holds_older_posts(settings: Settings, redis: Redis) -> None:
    """Trimming by ``MINID ~`` removes whole stream nodes: a reader must not show what it left."""
    tenant = provision(settings)
    now = time.time()
    # 30 h of posts, 10 minutes apart, none on the edge of the retention.
    post_every(settings.redis_url or "", settings, tenant, 600, 181, small_post, ends_at=now - 300)

    held = [int(entry_id.split(b"-")[0]) / 1000 for entry_id, _ in redis.xrange(keys.callback_log(tenant.appid))]
    assert min(held) < now - DAY - 3600  # Redis still holds posts well past the retention ...
    shown = read_log(settings, tenant.appid, limit=1000)
    assert shown and all(entry.received_at >= now - DAY for entry in shown)  # ... which no reader shows
    assert len(shown) == len([t for t in held if t >= now - DAY]) == DAY // 600
    assert len(read_log(settings, tenant.appid, limit=1000, since_seconds=2 * DAY)) == len(shown)  # nor --since


def test_a_delivered_delivery_past_the_retention_is_not_shown_by_its_id(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    now = time.time()
    post_every(settings.redis_url or "", settings, tenant, 600, 181, small_post, ends_at=now)
    entries = [entry_id.decode() for entry_id, _ in redis.xrange(keys.callback_log(tenant.appid))]
    old, recent = entries[0], entries[-1]
    assert int(old.split("-")[0]) / 1000 < now - DAY
    for entry in (old, recent):  # delivered: the record is gone, the post names the delivery
        redis.delete(keys.delivery(deliveryid.from_entry(tenant.appid, entry)))

    async def show(entry: str) -> str:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return (await byid.show(client, keys, settings, deliveryid.from_entry(tenant.appid, entry))).state
        finally:
            await client.aclose()

    assert asyncio.run(show(recent)) == "delivered"
    with pytest.raises(NotFound):
        asyncio.run(show(old))


@pytest.mark.parametrize(("name", "body", "per_node"), [("84-byte", small_post, 100), ("940-byte", "msg", 27)])
def test_redis_holds_a_post_past_the_retention_at_most_a_stream_nodes_posts_apart(
    valkey_url: str, env: dict[str, str], name: str, body: Any, per_node: int
) -> None:
    """The figures of docs/events.md: a day's retention, one post every 10 minutes, on the embedded server's settings.

    A post is removed with its stream node, at the first post after the node's newest is a retention old;
    a node holds up to 100 posts, or ``stream-node-max-bytes`` (16 KB) of them: 27 Msg posts of 940 bytes.
    """
    from tests.bench.memory import msg_post

    make = (lambda n: msg_post("p-", n)) if body == "msg" else body
    settings = Settings.from_env(dict(env, SVCGW_REDIS_URL=valkey_url))
    tenant = provision(settings)
    interval, count = 600, DAY // 600 + 3 * per_node  # past a day, and a few nodes more
    oldest: list[tuple[float, float]] = []  # (a post's time, the oldest post held once it is stored)

    async def after(client: AsyncRedis, now: float) -> None:
        (first,) = await client.xrange(keys.callback_log(tenant.appid), count=1)
        oldest.append((now, int(first[0].split(b"-")[0]) / 1000))
        shown = await read(client, keys, settings, tenant.appid, limit=1000, now=now)
        assert all(entry.received_at > now - DAY - 0.001 for entry in shown)  # entry ids are in milliseconds

    post_every(valkey_url, settings, tenant, interval, count, make, ends_at=time.time(), after=after)
    # Until the next post, what is held after a post stays held.
    held_past = max(next_post - DAY - held for (_, held), (next_post, _) in itertools.pairwise(oldest))
    assert held_past > 0, f"{name}: nothing held past the retention"
    measured = f"{name}: {held_past / interval:.1f} posts' time past the retention"
    assert held_past == pytest.approx(per_node * interval, abs=0.01), measured
