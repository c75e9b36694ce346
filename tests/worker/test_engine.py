"""The engine's parts that need no network: destination slots and the claim script's deferral."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
from redis import Redis

from svcgw import keys
from svcgw.settings import Settings
from tests.conftest import provision
from tests.svcgw.test_deadletters import ingest
from worker.engine import DEFER_SECONDS, DestinationSlots
from worker.queue import DeliveryQueue


def test_slots_cap_a_host_and_free_on_release() -> None:
    slots = DestinationSlots(cap=2, timeout=10)
    first, second = slots.acquire("a:1"), slots.acquire("a:1")
    assert first is not None and second is not None
    assert slots.acquire("a:1") is None
    assert slots.acquire("b:1") is not None
    assert set(slots.saturated()) == {"a:1"}
    slots.release("a:1", first)
    assert slots.saturated() == {}
    assert slots.acquire("a:1") is not None


def test_the_wait_doubles_while_a_host_frees_no_slot() -> None:
    slots = DestinationSlots(cap=1, timeout=5)
    token = slots.acquire("hang:1")
    assert token is not None
    waits = [slots.defer_delay("hang:1") for _ in range(8)]
    assert DEFER_SECONDS * 0.8 <= waits[0] <= DEFER_SECONDS * 1.2
    assert waits[2] > waits[0] * 2
    assert all(w <= 5 * 1.2 for w in waits) and waits[-1] >= 5 * 0.8
    slots.release("hang:1", token)
    slots.acquire("hang:1")
    assert slots.defer_delay("hang:1") <= 1.2  # answered quickly this time: short waits again


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "https://Hooks.Example.COM/a?b=c#d",
        "https://user:pass@example.com:8443",
        "http://[::1]:9000/x/y",
        "HTTPS://example.com?only=query",
    ],
)
def test_claim_script_defers_jobs_of_saturated_hosts(settings: Settings, redis: Redis, url: str) -> None:
    # The script finds the host in Lua; it must be the engine's urlsplit(url).netloc.lower().
    host = urlsplit(url).netloc.lower()
    tenant = provision(settings, url=url)
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"d1"}]}')
    queue = DeliveryQueue(redis, settings.queue_name)
    due = time.time() + 30
    assert queue.claim_batch(10, "test", {host: due}) == []
    assert redis.zscore(keys.rq_scheduled(settings.queue_name), delivery_id) == pytest.approx(due)
    assert redis.hget(keys.rq_job(delivery_id), "status") == b"scheduled"
    assert redis.zcard(keys.inflight(settings.queue_name)) == 0

    redis.zrem(keys.rq_scheduled(settings.queue_name), delivery_id)
    redis.rpush(keys.rq_queue(settings.queue_name), delivery_id)
    (claimed,) = queue.claim_batch(10, "test", {"other:1": due})
    assert claimed.delivery_id == delivery_id and claimed.own["url"] == url
    assert redis.hget(keys.rq_job(delivery_id), "status") == b"started"
