"""Every job row rq-dashboard lists can be opened; the finished registry stays empty, by design.

A delivered delivery leaves RQ's keys at once (docs/operations.md, rq-dashboard's Finished count),
so no registry holds an id whose job is gone. Real worker, real sink, the real app over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from receiver.dashboard import REGISTRIES
from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.support import Sink, ThreadedServer, ThreadedWorker, wait_for

USER, PASSWORD = "operator", "dashboard-pass-123"
DELIVERIES = 30


@pytest.fixture
def configured(env: dict[str, str]) -> Settings:
    return Settings.from_env(dict(env, SVCGW_DASHBOARD_USER=USER, SVCGW_DASHBOARD_PASSWORD=PASSWORD))


@pytest.fixture
def dashboard_server(configured: Settings) -> Iterator[str]:
    from receiver.app import create_app

    served = ThreadedServer(create_app(configured)).start()
    yield served.base
    served.stop()


def test_after_30_deliveries_and_a_dead_letter_every_listed_job_opens_and_none_is_finished(
    configured: Settings, dashboard_server: str, redis: Redis, sink: Sink
) -> None:
    tenant = provision(configured, sink.url)
    worker = ThreadedWorker(configured).start()
    try:
        with httpx.Client(timeout=10) as http:
            for n in range(DELIVERIES):
                body = b'{"event_type":"Msg","events":[{"id":"ok%d"}]}' % n
                http.post(tenant.receiver_url(dashboard_server), content=body).raise_for_status()
            wait_for(lambda: len(sink.posts()) == DELIVERIES, timeout=30, what="the deliveries at the sink")
            wait_for(lambda: redis.llen(keys.rq.queue(configured.queue_name)) == 0, timeout=10, what="an empty queue")
            sink.set(status=500)
            http.post(tenant.receiver_url(dashboard_server), content=b'{"event_type":"Msg","events":[{"id":"x"}]}')
            wait_for(lambda: redis.zcard(keys.rq.failed(configured.queue_name)) == 1, timeout=30, what="a dead letter")
    finally:
        worker.stop()

    base = dashboard_server + "/rq/0"
    with httpx.Client(timeout=15, auth=(USER, PASSWORD)) as http:
        (queue,) = [q for q in http.get(base + "/data/queues.json").json()["queues"] if q["name"] == "svcgw"]
        assert queue["finished_job_registry_count"] == 0 and queue["failed_job_registry_count"] == 1
        listed: dict[str, list[str]] = {}
        for registry in sorted(REGISTRIES):
            answer = http.get(base + f"/data/jobs/svcgw/{registry}/100/asc/1.json")
            assert answer.status_code == 200, registry
            listed[registry] = [job["id"] for job in answer.json()["jobs"]]
            for job_id in listed[registry]:
                assert http.get(base + f"/data/job/{job_id}.json").status_code == 200, (registry, job_id)
                assert http.get(base + f"/view/job/{job_id}").status_code == 200, (registry, job_id)
    assert listed["finished"] == [] and len(listed["failed"]) == 1
    assert sum(len(ids) for ids in listed.values()) == 1
