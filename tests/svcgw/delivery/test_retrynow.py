"""Retry now, with a real engine and a real sink: one attempt at once, counted, the schedule going on."""

from __future__ import annotations

import asyncio

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from svcgw.config.settings import Settings
from svcgw.delivery import retrynow
from svcgw.delivery.listing import Delivery
from svcgw.errors import NotFound
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.support import Sink, wait_for
from tests.svcgw.delivery.test_deadletters import ingest
from tests.svcgw.delivery.test_listing import shown
from tests.worker.test_engine import Running


def retry(settings: Settings, delivery_id: str, account: str | None = None) -> None:
    async def go() -> None:
        client = AsyncRedis.from_url(settings.redis_url or "")
        try:
            await retrynow.retry_now(client, keys, settings, delivery_id, account=account)
        finally:
            await client.aclose()

    asyncio.run(go())


def test_retry_now_is_the_next_attempt_brought_forward(env: dict[str, str], sink: Sink, redis: Redis) -> None:
    # Retries an hour apart: only retry now can make the attempts seen here.
    settings = Settings.from_env(dict(env, SVCGW_RETRY_SCHEDULE="3600,7200,10800"))
    tenant = provision(settings, url=sink.url)
    other = provision(settings, url=sink.url)
    sink.set(status=500)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"r1"}]}')

    def state() -> Delivery:
        return shown(settings, delivery_id)

    with Running(settings):
        wait_for(lambda: len(state().attempts) == 1, timeout=10, what="the first attempt")
        first = state()
        assert first.state == "retrying" and first.next_attempt_at is not None
        assert first.next_attempt_at == pytest.approx(first.attempts[0].at + 3600, abs=5)

        with pytest.raises(NotFound, match="no delivery") as foreign:
            retry(settings, delivery_id, account=other.account)  # another account's: as if absent
        assert foreign.value.what == "delivery"
        retry(settings, delivery_id, account=tenant.account)
        wait_for(lambda: len(state().attempts) == 2, timeout=10, what="the attempt made now")
        second = state()
        assert len(sink.posts()) == 2 and sink.posts()[-1].headers["x-svc-attempt"] == "2"
        # It failed: the schedule goes on from it, with its next delay.
        assert second.state == "retrying" and second.next_attempt_at is not None
        assert second.next_attempt_at == pytest.approx(second.attempts[1].at + 7200, abs=5)
        assert redis.hget(keys.delivery(delivery_id), "failures") == b"2"

        sink.set(status=200)
        retry(settings, delivery_id)
        wait_for(lambda: state().state == "delivered", timeout=10, what="the delivery")
        assert [a.status for a in state().attempts] == [500, 500, 200]
        assert redis.zscore(keys.rq.scheduled(settings.queue_name), delivery_id) is None

    with pytest.raises(retrynow.NotRetrying, match="delivered"):
        retry(settings, delivery_id)
    with pytest.raises(NotFound):
        retry(settings, "dlv_000000000000000000000000")
    assert len(sink.posts()) == 3


def test_retry_now_refuses_a_pending_delivery_and_a_dead_letter(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"p1"}]}')
    with pytest.raises(retrynow.NotRetrying, match="pending"):
        retry(settings, delivery_id)
    redis.hset(keys.delivery(delivery_id), "state", "dead")
    with pytest.raises(retrynow.NotRetrying, match="dead"):
        retry(settings, delivery_id)
    # Retrying, but its attempt already taken by a worker: not a second one.
    redis.hset(keys.delivery(delivery_id), "state", "retrying")
    with pytest.raises(retrynow.NotRetrying, match="being attempted"):
        retry(settings, delivery_id)
    assert redis.lrange(keys.rq.queue(settings.queue_name), 0, -1) == [delivery_id.encode()]
