"""The engine's parts that need no network: the claim script's deferral of saturated hosts."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest
from redis import Redis

from svcgw import keys
from svcgw.settings import Settings
from tests.conftest import provision
from tests.svcgw.test_deadletters import ingest
from tests.worker.support import claim_batch


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
    due = time.time() + 30
    assert claim_batch(settings, 10, {host: due}) == []
    assert redis.zscore(keys.rq_scheduled(settings.queue_name), delivery_id) == pytest.approx(due)
    assert redis.hget(keys.rq_job(delivery_id), "status") == b"scheduled"
    assert redis.zcard(keys.inflight(settings.queue_name)) == 0

    redis.zrem(keys.rq_scheduled(settings.queue_name), delivery_id)
    redis.rpush(keys.rq_queue(settings.queue_name), delivery_id)
    (claimed,) = claim_batch(settings, 10, {"other:1": due})
    assert claimed.delivery_id == delivery_id and claimed.own["url"] == url
    assert redis.hget(keys.rq_job(delivery_id), "status") == b"started"
