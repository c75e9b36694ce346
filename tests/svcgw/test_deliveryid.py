"""Delivery ids named by their posts' log entries, and the bare outcomes kept of delivered ones."""

from __future__ import annotations

import asyncio

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw import deliveryid
from svcgw.config.settings import Settings
from svcgw.delivery.outcomes import Outcome, attempts_of, delivered, late_bucket, late_buckets, late_expire_at
from svcgw.intake.ingest import Ingest
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision


def test_ids_name_the_instance_and_the_entry() -> None:
    assert deliveryid.from_entry("we_8404e9da41e7b63", "1795645968935-0") == "we_8404e9da41e7b63-1795645968935-0"
    assert deliveryid.parse("we_8404e9da41e7b63-1795645968935-0") == ("we_8404e9da41e7b63", "1795645968935-0")
    assert deliveryid.parse("dlv_0123456789abcdef01234567") is None  # the older form
    assert deliveryid.parse("we_x-12-") is None and deliveryid.parse("") is None
    assert deliveryid.takes_entry_ids("we_8404e9da41e7b63") and not deliveryid.takes_entry_ids("we x")
    assert deliveryid.entry_ms("1795645968935-7") == 1795645968935


def test_a_further_destinations_delivery_is_named_by_the_post_and_the_destination() -> None:
    primary, destination = "we_8404e9da41e7b63-1795645968935-0", "dst_0123456789abcdef"
    named = deliveryid.for_destination(primary, destination)
    assert named == "we_8404e9da41e7b63-1795645968935-0_0123456789abcdef"
    assert deliveryid.parse_destination(named) == ("we_8404e9da41e7b63", "1795645968935-0", destination)
    # parse stays exact for the primary's form; parse_named takes both.
    assert deliveryid.parse(named) is None and deliveryid.parse_destination(primary) is None
    assert deliveryid.parse_named(named) == ("we_8404e9da41e7b63", "1795645968935-0", destination)
    assert deliveryid.parse_named(primary) == ("we_8404e9da41e7b63", "1795645968935-0", None)
    assert deliveryid.parse_named("dlv_0123456789abcdef01234567") is None
    assert deliveryid.received_at(named) == 1795645968.935
    assert deliveryid.outcome_key("1795645968935-0", destination) == "1795645968935-0_0123456789abcdef"
    assert deliveryid.outcome_key("1795645968935-0", None) == "1795645968935-0"
    # The older form, or a destination id of another shape, keeps dlv_ ids.
    assert deliveryid.for_destination("dlv_0123456789abcdef01234567", destination) is None
    assert deliveryid.for_destination(primary, "dst_a") is None


def test_the_clock_proposes_rising_ids_and_jumps_above_what_it_saw() -> None:
    clock = deliveryid.EntryClock()
    assert clock.propose(1.0) == "1000-0"
    assert clock.propose(1.0) == "1000-1"
    assert clock.propose(0.5) == "1000-2"  # a clock stepped back changes nothing
    clock.seen("5000-3")
    assert clock.propose(1.0) == "5000-4"
    assert clock.propose(6.0) == "6000-0"


def test_bare_outcomes_read_back() -> None:
    attempts = attempts_of(1_000_000, "35:503:250,60000:timeout:10000,120500:200:12,x")
    assert [(a.number, a.at, a.ok, a.status, a.error, a.duration_ms) for a in attempts[:3]] == [
        (1, 1000.035, False, 503, None, 250.0),
        (2, 1060.0, False, None, "timeout", 10000.0),
        (3, 1120.5, True, 200, None, 12.0),
    ]
    assert attempts[3].error == "unreadable attempt record"
    assert Outcome.from_late(b'1:200:3\n["a"]') == Outcome("1:200:3", b'["a"]')
    assert Outcome.from_late(b"1:200:3") == Outcome("1:200:3", None)
    body = b'{"event_type":"Msg","events":[{"id":"a"},{"id":"b"}]}'
    shown = delivered("we_x-1000000-0", "we_x", "acc", "1000000-0", body, Outcome("1:200:3", b'["b"]'))
    facts = (shown.event_type, shown.event_ids, shown.received_at, shown.delivered_at)
    assert facts == ("Msg", ("b",), 1000.0, 1000.004)
    assert delivered("we_x-1000000-0", "we_x", "acc", "1000000-0", body, None).event_ids == ("a", "b")


def test_late_buckets_keep_an_outcome_a_whole_retention() -> None:
    day = 86400
    written = 10 * day + 5
    bucket = late_bucket(written, day)
    assert late_expire_at(bucket, day) >= written + day
    assert bucket in late_buckets(written + day - 1, day) and bucket in late_buckets(written, day)


def test_a_proposed_entry_id_below_the_log_is_proposed_again(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    ahead = f"{int(2e12)}-5"  # a receiver whose clock is far ahead wrote last
    redis.xadd(keys.callback_log(tenant.appid), {"body": b"{}", "accepted": 0, "duplicates": 1}, id=ahead)

    async def post() -> str | None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            body = b'{"event_type":"Msg","events":[{"id":"late"}]}'
            return (await Ingest(client, keys, settings).accept(tenant.appid, tenant.receiver_token, body)).delivery_id
        finally:
            await client.aclose()

    delivery_id = asyncio.run(post())
    assert delivery_id == deliveryid.from_entry(tenant.appid, f"{int(2e12)}-6")
    assert redis.xlen(keys.callback_log(tenant.appid)) == 2 and redis.exists(keys.delivery(delivery_id))
    # Nothing was written by the refused try: the event is not a repeat of itself.
    assert redis.hget(keys.delivery(delivery_id), "dup") is None


def test_posts_to_one_instance_at_once_through_two_receivers_are_all_stored_once(
    settings: Settings, redis: Redis
) -> None:
    """In flight together, posts land out of the order their ids were proposed in; each refused one tries again."""
    tenant = provision(settings)
    count = 400

    async def post_all() -> list[str | None]:
        clients = [AsyncRedis.from_url(settings.redis_url or "") for _ in range(2)]
        receivers = [Ingest(client, keys, settings) for client in clients]
        limit = asyncio.Semaphore(16)

        async def one(n: int) -> str | None:
            body = b'{"event_type":"Msg","events":[{"id":"at-once-%d"}]}' % n
            async with limit:
                return (await receivers[n % 2].accept(tenant.appid, tenant.receiver_token, body)).delivery_id

        try:
            return await asyncio.gather(*(one(n) for n in range(count)))
        finally:
            for receiver in receivers:
                await receiver.aclose()
            for client in clients:
                await client.aclose()

    delivery_ids = asyncio.run(post_all())
    assert None not in delivery_ids and len(set(delivery_ids)) == count
    assert redis.xlen(keys.callback_log(tenant.appid)) == count
    assert all(redis.exists(keys.delivery(d)) for d in delivery_ids if d is not None)
