"""The queue's scripts and the order of service events: finishing one queues its instance's next."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from svcgw.config.settings import Settings
from svcgw.delivery import chainkeys, deadletters
from svcgw.delivery.queue import DeliveryQueue, Finish
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.shards.clients import ShardRedis
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import Tenant, provision
from tests.support import service_chain, wait_for
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import claim, finish, with_queue


def service_event(settings: Settings, tenant: Tenant, kind: str = "InstanceOffline") -> str:
    """Queue one service event as a liveness flip does, in a transaction of its own."""
    delivery_id = new_delivery_id()
    client = Redis.from_url(settings.redis_url or "")
    try:
        with client.pipeline(transaction=True) as pipe:
            queue_delivery(pipe, keys, settings, appid=tenant.appid, account=tenant.account, event_type=kind,
                           events=[{"id": f"{kind}:{delivery_id}"}], delivery_id=delivery_id, now=time.time(),
                           chain=service_chain(client, tenant.appid))
            pipe.execute()
    finally:
        client.close()
    return delivery_id


def ended(settings: Settings, tenant: Tenant, delivery_id: str, kind: Any, **extra: Any) -> bool:
    due = time.time() + (3600 if kind == "dead" else 0.01)
    return finish(settings, Finish(delivery_id, tenant.appid, kind, b'{"attempt":1}', due=due, retention=60, **extra))


def queued(redis: Redis, settings: Settings) -> list[str]:
    return [x.decode() for x in redis.lrange(keys.rq.queue(settings.queue_name), 0, -1)]


def deferred(redis: Redis, settings: Settings) -> list[str]:
    return [x.decode() for x in redis.zrange(keys.rq.deferred(settings.queue_name), 0, -1)]


def chain(redis: Redis, tenant: Tenant) -> list[str]:
    return [x.decode() for x in redis.lrange(keys.service_events(tenant.appid), 0, -1)]


def status(redis: Redis, delivery_id: str) -> str:
    return (redis.hget(keys.rq.job(delivery_id), "status") or b"").decode()


def test_a_retry_holds_the_next_and_delivering_it_queues_the_next(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    first, second, third = (service_event(settings, tenant) for _ in range(3))
    assert claim(settings, 10) == [first]
    assert ended(settings, tenant, first, "retry")
    assert queued(redis, settings) == [] and deferred(redis, settings) == [second, third]
    wait_for(lambda: with_queue(settings, lambda q: q.promote_due()).moved, timeout=5, what="the retry to be due")
    assert status(redis, first) == "queued"  # named by queue_mark.lua once moved
    assert claim(settings, 10) == [first]
    assert ended(settings, tenant, first, "delivered")
    # In the same step: the first leaves the chain, the second is queued as RQ has it.
    assert queued(redis, settings) == [second] and deferred(redis, settings) == [third]
    assert status(redis, second) == "queued" and redis.hget(keys.rq.job(second), "enqueued_at")
    assert chain(redis, tenant) == [second, third]
    assert claim(settings, 10) == [second]


def test_a_dead_service_event_lets_the_next_go_and_its_replay_stays_out_of_the_order(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    first, second = service_event(settings, tenant), service_event(settings, tenant, "InstanceRecovered")
    assert claim(settings, 10) == [first]
    assert ended(settings, tenant, first, "dead", error=b"")
    assert queued(redis, settings) == [second] and chain(redis, tenant) == [second]

    (result,) = asyncio.run(_replay(settings, first))
    assert result.replayed
    # The replay goes at once, ahead of nothing and behind nothing: it is in no chain.
    assert queued(redis, settings) == [second, first] and chain(redis, tenant) == [second]
    claimed = claim(settings, 10)
    assert claimed == [second, first]
    assert ended(settings, tenant, first, "delivered")
    assert chain(redis, tenant) == [second]  # the replay's end changes nothing
    third = service_event(settings, tenant)
    assert deferred(redis, settings) == [third]
    assert ended(settings, tenant, second, "delivered")
    assert queued(redis, settings) == [third] and chain(redis, tenant) == [third]


async def _replay(settings: Settings, delivery_id: str) -> list[deadletters.ReplayResult]:
    client = AsyncRedis.from_url(settings.redis_url or "")
    try:
        return await deadletters.replay([ShardRedis(client, keys)], settings, ids=[delivery_id])
    finally:
        await client.aclose()


def test_a_lost_lease_hands_the_first_back_and_the_order_holds(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    first, second = service_event(settings, tenant), service_event(settings, tenant)

    async def claim_briefly(queue: DeliveryQueue) -> list[str]:
        short = DeliveryQueue(queue.redis, keys, settings.queue_name, lease_seconds=0.05)
        return [c.delivery_id for c in await short.claim_batch(10, "killed")]

    assert with_queue(settings, claim_briefly) == [first]
    # The worker that claimed it is gone: its lease runs out and the job is handed back, still first.
    wait_for(lambda: with_queue(settings, lambda q: q.reclaim_expired()).moved == 1, timeout=5,
             what="the lease to run out")
    assert queued(redis, settings) == [first] and deferred(redis, settings) == [second]
    assert status(redis, first) == "queued"
    assert chain(redis, tenant) == [first, second]
    assert claim(settings, 10) == [first]
    assert ended(settings, tenant, first, "delivered")
    assert queued(redis, settings) == [second]


def test_the_late_end_of_a_lost_claim_still_moves_the_order_on(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    first, second = service_event(settings, tenant), service_event(settings, tenant)
    assert claim(settings, 10) == [first]
    redis.zrem(keys.inflight(settings.queue_name), first)  # as if the lease had run out and been reclaimed
    redis.rpush(keys.rq.queue(settings.queue_name), first)
    assert not ended(settings, tenant, first, "delivered")
    assert queued(redis, settings) == [second] and chain(redis, tenant) == [second]


def test_customer_events_are_never_held(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    offline = service_event(settings, tenant)
    assert claim(settings, 10) == [offline]
    assert ended(settings, tenant, offline, "retry")
    message = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')
    recovered = service_event(settings, tenant, "InstanceRecovered")
    assert queued(redis, settings) == [message] and deferred(redis, settings) == [recovered]
    assert redis.hget(keys.delivery(message), "chain") is None


def test_an_order_whose_first_vanished_is_repaired_by_the_next_event(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    first, second = service_event(settings, tenant), service_event(settings, tenant)
    # rq's tools can delete a queued job; the claim script then skips it and nothing ends it.
    redis.delete(keys.rq.job(first))
    assert claim(settings, 10) == []
    assert deferred(redis, settings) == [second]
    third = service_event(settings, tenant)
    assert queued(redis, settings) == [second] and deferred(redis, settings) == [third]
    assert chain(redis, tenant) == [second, third]


def test_the_queue_that_claimed_a_service_event_finishes_it_from_what_the_claim_read(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings)
    first, second = service_event(settings, tenant), service_event(settings, tenant)
    message = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"m1"}]}')

    async def engine_like(queue: DeliveryQueue) -> list[bool]:
        claimed = await queue.claim_batch(10, "engine")
        assert [c.delivery_id for c in claimed] == [first, message]
        assert claimed[0].fields["chain"] == keys.service_events(tenant.appid).encode()
        assert claimed[1].fields["chain"] is None
        done = [Finish(c.delivery_id, tenant.appid, "delivered", b"{}", retention=60) for c in claimed]
        held = [finished.held for finished in await queue.finish_detailed(done)]
        assert not queue._chains  # every claim ended: nothing kept
        return held

    assert with_queue(settings, engine_like) == [True, True]
    assert queued(redis, settings) == [second] and chain(redis, tenant) == [second]


def test_a_dropped_service_event_lets_the_next_go(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    first, second = service_event(settings, tenant), service_event(settings, tenant)
    redis.hdel(keys.delivery(first), "body")  # its data expired: the engine drops the job
    assert claim(settings, 10) == [first]
    assert finish(settings, Finish(first, "", "drop"))
    assert queued(redis, settings) == [second] and chain(redis, tenant) == [second]


def test_a_job_deleted_while_scheduled_is_not_made_again_when_promoted(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    gone = service_event(settings, tenant)
    kept = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"promoted"}]}')
    for delivery_id in (gone, kept):
        redis.lrem(keys.rq.queue(settings.queue_name), 0, delivery_id)
        redis.zadd(keys.rq.scheduled(settings.queue_name), {delivery_id: time.time() - 1})
        redis.hset(keys.rq.job(delivery_id), "status", "scheduled")
    redis.delete(keys.rq.job(gone))  # rq's tools
    assert with_queue(settings, lambda q: q.promote_due()).moved == 2
    assert not redis.exists(keys.rq.job(gone)) and status(redis, kept) == "queued"


def test_a_service_event_queued_after_the_finish_read_the_chain_is_put_in_play(
    settings: Settings, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finish names the chain's members it read; one queued since is advanced by a second call."""
    tenant = provision(settings)
    first = service_event(settings, tenant)
    assert claim(settings, 10) == [first]
    later: list[str] = []
    read = chainkeys.read

    async def read_then_queue(client: Any, names: Any, chains: Any) -> list[str]:
        members = await read(client, names, chains)
        later.append(service_event(settings, tenant))  # between the read and the finish
        return members

    monkeypatch.setattr(chainkeys, "read", read_then_queue)
    assert ended(settings, tenant, first, "delivered")
    assert queued(redis, settings) == later and chain(redis, tenant) == later
    assert status(redis, later[0]) == "queued" and deferred(redis, settings) == []


def test_queueing_behind_a_chain_other_than_the_one_read_writes_nothing(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    first = service_event(settings, tenant)
    with redis.pipeline(transaction=True) as pipe:
        queue_delivery(pipe, keys, settings, appid=tenant.appid, account=tenant.account, event_type="InstanceOffline",
                       events=[{"id": "stale"}], delivery_id=new_delivery_id(), now=time.time(), chain=[])  # fmt: skip
        with pytest.raises(ResponseError, match="chain changed"):
            pipe.execute()
    assert chain(redis, tenant) == [first] and queued(redis, settings) == [first]
    assert redis.get(keys.service_event_seq(tenant.appid)) == b"1"


def test_retries_due_at_once_are_queued_taking_turns_by_instance(settings: Settings, redis: Redis) -> None:
    """Ties in the scheduled registry come in id order, an instance's side by side; the queue takes
    them in turns by instance, each instance's in its own order, a ``dlv_`` id as an instance of its own."""
    ids = [
        "we_a-1700000000000-0", "we_a-1700000000000-1", "we_a-1700000000001-0",
        "we_b-1700000000000-0", "we_b-1700000000000-1_00112233aabbccdd", "we_c-1700000000002-0", "dlv_0f",
    ]  # fmt: skip
    due = time.time() - 1
    redis.zadd(keys.rq.scheduled(settings.queue_name), dict.fromkeys(ids, due))
    assert with_queue(settings, lambda q: q.promote_due()).moved == len(ids)
    assert redis.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [
        b"dlv_0f", b"we_a-1700000000000-0", b"we_b-1700000000000-0", b"we_c-1700000000002-0",
        b"we_a-1700000000000-1", b"we_b-1700000000000-1_00112233aabbccdd",
        b"we_a-1700000000001-0",
    ]  # fmt: skip
    assert redis.zcard(keys.rq.scheduled(settings.queue_name)) == 0


def test_reclaimed_leases_go_to_the_front_without_taking_turns(settings: Settings, redis: Redis) -> None:
    """Only due retries take turns by instance: a reclaimed lease goes before the queue's own jobs, as it did."""
    redis.rpush(keys.rq.queue(settings.queue_name), "we_z-1700000000009-0")
    now = time.time()
    redis.zadd(keys.inflight(settings.queue_name), {"we_a-1700000000000-0": now - 3, "we_a-1700000000000-1": now - 2,
                                                    "we_b-1700000000000-0": now - 1})  # fmt: skip
    assert with_queue(settings, lambda q: q.reclaim_expired()).moved == 3
    # LPUSH one by one: the longest expired ends up last of the three, each before the queue's own.
    assert redis.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [
        b"we_b-1700000000000-0",
        b"we_a-1700000000000-1",
        b"we_a-1700000000000-0",
        b"we_z-1700000000009-0",
    ]


def test_a_promotion_of_one_long_run_and_many_single_retries_queues_each_once(settings: Settings, redis: Redis) -> None:
    busy = [f"we_busy-{1700000000000 + n}-0" for n in range(300)]
    single = [f"we_s{n:03d}-1700000000000-0" for n in range(300)]
    redis.zadd(keys.rq.scheduled(settings.queue_name), dict.fromkeys(busy + single, time.time() - 1))
    assert with_queue(settings, lambda q: q.promote_due()).moved == 600
    queued = [i.decode() for i in redis.lrange(keys.rq.queue(settings.queue_name), 0, -1)]
    assert sorted(queued) == sorted(busy + single)
    assert set(queued[:301]) == {busy[0], *single}  # the first round: one of every instance
    busy_ids = set(busy)
    assert [i for i in queued if i in busy_ids] == busy  # the busy one's in their order
