"""One destination's deliveries from its index: newest first, paged without gaps, merged over the shards."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery import bydestination
from svcgw.delivery.attempt import Attempt
from svcgw.delivery.listing import Page
from svcgw.delivery.queue import Finish
from svcgw.errors import Invalid
from svcgw.shards.clients import ShardRedis
from svcgw.storage.keys import PLAIN as keys
from svcgw.storage.keys import KeySpace
from tests.conftest import provision
from tests.svcgw.delivery.fanout import fan_out, index_only, kill_among
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import claim_batch, finish

OTHER = KeySpace("{s1}")  # a second shard's names, on the same server


def listed(settings: Settings, destination: str, *, shards: int = 1, **kwargs: Any) -> Page:
    async def go() -> Page:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            clients = [ShardRedis(client, keys), ShardRedis(client, OTHER)][:shards]
            return await bydestination.list_destination_deliveries(clients, settings, destination, **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(go())


def msg(event_id: str) -> bytes:
    return b'{"event_type":"Msg","events":[{"id":"' + event_id.encode() + b'"}]}'


def test_newest_first_with_states_attempts_and_paging(settings: Settings) -> None:
    tenant = provision(settings)
    made: list[str] = []
    for n in range(5):
        primary = ingest(settings, tenant, msg(f"e{n}"))
        (to_a,) = fan_out(settings, primary, ["dst_aaaa"])
        made.append(to_a)
        fan_out(settings, primary, ["dst_bbbb"])  # another destination's: not listed
    kill_among(settings, made[1], tenant.appid, 15)

    page = listed(settings, "dst_aaaa")
    assert [d.id for d in page.deliveries] == made[::-1] and page.next_before is None
    assert {d.destination for d in page.deliveries} == {"dst_aaaa"}
    dead = page.deliveries[3]
    assert dead.state == "dead" and [a.status for a in dead.attempts] == [500] and dead.event_ids == ("e1",)
    assert page.deliveries[0].state == "pending" and page.deliveries[0].attempts == ()

    seen: list[str] = []
    before = None
    for _ in range(5):
        one = listed(settings, "dst_aaaa", limit=2, before=before)
        seen += [d.id for d in one.deliveries]
        before = one.next_before
        if before is None:
            break
    assert seen == made[::-1]
    assert listed(settings, "dst_aaaa", account=provision(settings).account).deliveries == []  # another account's
    assert listed(settings, "dst_cccc").deliveries == []
    for bad in ({"limit": 0}, {"before": "garbage"}, {"before": "12:dlv x"}):
        with pytest.raises(Invalid):
            listed(settings, "dst_aaaa", **bad)


def test_the_same_millisecond_and_expired_records_and_the_retention(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    index_only(settings, "dst_aaaa", "dlv_old0000000000000000000", received=time.time() - settings.log_retention - 5)
    index_only(settings, "dst_aaaa", "dlv_gone000000000000000000")  # its record expired: left out
    primary = ingest(settings, tenant, msg("t1"))
    twins = fan_out(settings, primary, ["dst_aaaa"]) + fan_out(settings, primary, ["dst_aaaa"])
    index = keys.destination_deliveries("dst_aaaa")
    assert [fields[b"d"].decode() for _, fields in redis.xrange(index)][-2:] == twins

    first = listed(settings, "dst_aaaa", limit=1)
    second = listed(settings, "dst_aaaa", limit=1, before=first.next_before)
    rest = listed(settings, "dst_aaaa", limit=5, before=second.next_before)
    everything = [d.id for p in (first, second, rest) for d in p.deliveries]
    assert sorted(everything) == sorted(twins) and len(everything) == 2
    assert rest.next_before is None


def test_an_accounts_destination_is_merged_over_the_shards(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    now = time.time()
    on_zero = fan_out(settings, ingest(settings, tenant, msg("z1")), ["dst_aaaa"])[0]
    # The same destination's delivery of an instance of the account on the second shard.
    elsewhere = "dlv_" + "e" * 24
    redis.hset(
        OTHER.delivery(elsewhere),
        mapping={"appid": "we_other", "account": tenant.account, "event_type": "Msg", "state": "delivered",
                 "received_at": repr(now + 1), "delivered_at": repr(now + 2), "ids": '["o1"]',
                 "destination": "dst_aaaa"},
    )  # fmt: skip
    redis.xadd(OTHER.destination_deliveries("dst_aaaa"), {"d": elsewhere}, id=f"{int((now + 1) * 1000)}-*")

    assert [d.id for d in listed(settings, "dst_aaaa").deliveries] == [on_zero]  # one shard
    both = listed(settings, "dst_aaaa", shards=2)
    assert [(d.id, d.state) for d in both.deliveries] == [(elsewhere, "delivered"), (on_zero, "pending")]
    assert both.deliveries[0].event_ids == ("o1",)
    first = listed(settings, "dst_aaaa", shards=2, limit=1)
    assert [d.id for d in first.deliveries] == [elsewhere]
    assert [d.id for d in listed(settings, "dst_aaaa", shards=2, before=first.next_before).deliveries] == [on_zero]
    # An instance's destination: its instance's shard alone (shard 0's here, the registry naming no other).
    assert [d.id for d in listed(settings, "dst_aaaa", shards=2, appid=tenant.appid).deliveries] == [on_zero]


def test_deliveries_named_by_their_post_are_shown_from_their_bare_outcome_once_delivered(settings: Settings) -> None:
    destination = "dst_" + "a" * 16
    tenant = provision(settings)
    made = [fan_out(settings, ingest(settings, tenant, msg(f"n{n}")), [destination], named=True)[0] for n in range(3)]
    # The queue: each post's primary, then its destination's delivery; the middle destination's is delivered.
    delivered = made[1]
    claimed = [c.delivery_id for c in claim_batch(settings, 6)]
    assert set(made) <= set(claimed)
    at = time.time()
    attempt = Attempt(ok=True, at=at, duration=0.02, status=204, destination="d")
    assert finish(settings, Finish(delivered, tenant.appid, "delivered", attempt.record(1), retention=3600))

    page = listed(settings, destination)
    assert [(d.id, d.state) for d in page.deliveries] == [
        (made[2], "pending"),
        (delivered, "delivered"),
        (made[0], "pending"),
    ]
    shown = page.deliveries[1]
    assert (
        shown.destination == destination and shown.event_ids == ("n1",) and [a.status for a in shown.attempts] == [204]
    )
    assert listed(settings, destination, account=provision(settings).account).deliveries == []
