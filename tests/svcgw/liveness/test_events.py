"""Service events: the spec's event objects, queued into the same pipeline as received posts."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.callbacks.signing import sign
from svcgw.config.settings import Settings
from svcgw.delivery import chainkeys
from svcgw.delivery.attempt import prepare_claimed
from svcgw.delivery.queueing import queue_delivery
from svcgw.deliveryid import new_delivery_id
from svcgw.liveness import transitions
from svcgw.liveness.events import (
    instance_offline,
    instance_recovered,
    iso8601,
)
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import Tenant, provision, run
from tests.support import Sink, is_delivered
from tests.svcgw.intake.test_calllog import read_log
from tests.worker.support import claim_batch, deliver_all
from worker.engine import Engine

APPID = "we_0123456789abcde"


def enqueue_service_event(
    settings: Settings, tenant: Tenant, event_type: str, events: list[dict[str, Any]]
) -> str:
    """Queue a service event as a liveness flip does: ``queue_delivery`` in a MULTI pipeline of its own."""

    async def go() -> str:
        client = AsyncRedis.from_url(settings.redis_url or "")
        delivery_id = new_delivery_id()
        try:
            async with client.pipeline(transaction=True) as pipe:
                queue_delivery(
                    pipe,
                    keys, settings,
                    appid=tenant.appid,
                    account=tenant.account,
                    event_type=event_type,
                    events=events,
                    delivery_id=delivery_id,
                    now=time.time(),
                    chain=chainkeys.members(await client.lrange(keys.service_events(tenant.appid), 0, -1)),
                )
                await pipe.execute()
        finally:
            await client.aclose()
        return delivery_id

    result: str = run(go())
    return result


def test_times_are_iso8601_with_an_offset_to_the_second() -> None:
    assert iso8601(1795319097.9) == "2026-11-22T03:44:57+00:00"


def test_instance_offline_has_the_spec_fields() -> None:
    event = instance_offline(
        APPID, reason="connection lost", action_required="relogin", detected_at=1795319097.4, last_seen_at=1795319037
    )
    assert event == {
        "id": f"InstanceOffline:{APPID}:1795319097",
        "reason": "connection lost",
        "action_required": "relogin",
        "detected_at": "2026-11-22T03:44:57+00:00",
        "last_seen_at": "2026-11-22T03:43:57+00:00",
    }
    with pytest.raises(ValueError, match="action_required"):
        instance_offline(APPID, reason="x", action_required="scan", detected_at=0, last_seen_at=0)


def test_instance_recovered_has_the_spec_fields() -> None:
    event = instance_recovered(APPID, recovered_at=1795319160.7, offline_since=1795319097.4, auto_reconnected=True)
    assert event == {
        "id": f"InstanceRecovered:{APPID}:1795319160",
        "recovered_at": "2026-11-22T03:46:00+00:00",
        "offline_seconds": 63,
        "auto_reconnected": True,
    }
    assert isinstance(event["offline_seconds"], int)
    clock_skew = instance_recovered(APPID, recovered_at=10, offline_since=12, auto_reconnected=False)
    assert clock_skew["offline_seconds"] == 0


def test_a_service_event_is_queued_like_a_received_post(settings: Settings, redis: Redis, sink: Sink) -> None:
    tenant = provision(settings, url=sink.url)
    event = instance_offline(
        tenant.appid, reason="connection lost", action_required="relogin", detected_at=1795319097, last_seen_at=0
    )
    delivery_id = enqueue_service_event(settings, tenant, "InstanceOffline", [event])

    delivery = {k.decode(): v for k, v in redis.hgetall(keys.delivery(delivery_id)).items()}
    body = delivery["body"]
    assert orjson.loads(body) == {
        "appid": tenant.appid,
        "event_type": "InstanceOffline",
        "events": [{**event, "seq": 1}],
    }
    assert delivery["seq"] == b"1"
    assert delivery["chain"] == keys.service_events(tenant.appid).encode()
    assert delivery["appid"] == tenant.appid.encode()
    assert delivery["account"] == tenant.account.encode()
    assert delivery["state"] == b"queued"
    assert delivery["attempts"] == delivery["failures"] == b"0"
    assert delivery["events"] == b"1"
    assert redis.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [delivery_id.encode()]
    assert keys.rq.queue(settings.queue_name).encode() in redis.smembers(keys.rq.queues)

    (entry,) = read_log(settings, tenant.appid)
    assert entry.body == body
    assert entry.delivery_id == delivery_id
    assert (entry.accepted, entry.duplicates) == (1, 0)
    assert redis.ttl(keys.callback_log(tenant.appid)) > 0

    # What the engine does with it: claim it with its data, then prepare the attempt.
    (claimed,) = claim_batch(settings, 10)
    assert claimed.delivery_id == delivery_id
    prepared = prepare_claimed(claimed, TokenVault.from_settings(settings))
    assert prepared is not None
    assert prepared.destination is not None and prepared.destination.url == sink.url


def test_a_service_event_is_signed_and_delivered_by_the_engine(settings: Settings, redis: Redis, sink: Sink) -> None:
    tenant = provision(settings, url=sink.url)
    event = instance_recovered(tenant.appid, recovered_at=1795319160, offline_since=1795319097, auto_reconnected=False)
    delivery_id = enqueue_service_event(settings, tenant, "InstanceRecovered", [event])

    deliver_all(Engine(settings, redis, TokenVault.from_settings(settings)))

    (received,) = sink.posts()
    assert orjson.loads(received.body)["events"] == [{**event, "seq": 1}]
    assert received.headers["x-svc-event-type"] == "InstanceRecovered"
    assert received.headers["x-svc-delivery-id"] == delivery_id
    secret = redis.hget(keys.callback_instance(tenant.appid), "secret")
    assert secret is not None
    timestamp = int(received.headers["x-svc-timestamp"])
    # Stored sealed: the vault opens it.
    clear = TokenVault.from_settings(settings).open(secret)
    assert received.headers["x-svc-signature"] == sign(clear, timestamp, received.body)
    assert is_delivered(redis, delivery_id)


def test_an_unknown_instance_gets_no_delivery(settings: Settings, redis: Redis) -> None:
    # Maintained and online, but owned by no account: a delivery needs the owning account.
    redis.hset(keys.instance(APPID), mapping={"maintained": "1", "status": "online"})

    async def flip() -> str | None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            return await transitions.go_offline(
                client, keys, settings, APPID, reason="x", action_required="relogin", detected_at=time.time()
            )
        finally:
            await client.aclose()

    assert run(flip()) is None
    assert redis.llen(keys.rq.queue(settings.queue_name)) == 0
