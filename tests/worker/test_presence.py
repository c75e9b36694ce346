"""A real ``svcgw worker`` is listed by rq's own ``Worker.all()`` with its counts, and leaves when killed.

That ``Worker.all`` and ``rq info`` list it with its queue is tests/svcgw/storage/test_rqformat.py's.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis
from rq.worker import Worker

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.support import Process, Sink, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def short_ttl_worker(env: dict[str, str]) -> Iterator[Process]:
    process = Process(["worker"], dict(env, SVCGW_WORKER_TTL="2"), "worker-presence").start()
    yield process
    process.stop()


def _ours(redis: Redis, pid: int) -> Worker | None:
    for found in Worker.all(connection=redis):
        if found.pid == pid:
            return found
    return None


def test_a_worker_is_listed_by_rq_with_its_counts_and_expires_when_killed(
    settings: Settings, redis: Redis, server: str, short_ttl_worker: Process, sink: Sink
) -> None:
    assert short_ttl_worker.proc is not None
    pid = short_ttl_worker.proc.pid
    listed = wait_for(lambda: _ours(redis, pid), timeout=20, what="the worker in rq's registry")
    assert listed.name.startswith("svcgw.") and listed.hostname == socket.gethostname()
    assert listed.birth_date is not None and listed.last_heartbeat is not None

    tenant = provision(settings, url=sink.url)
    for n in range(3):
        body = b'{"event_type":"Msg","events":[{"id":%d}]}' % (1000 + n)
        assert httpx.post(tenant.receiver_url(server), content=body, timeout=10).status_code == 200
    wait_for(lambda: len(sink.posts()) == 3, timeout=20, what="three deliveries")

    def counted() -> Worker | None:
        found = _ours(redis, pid)
        return found if found is not None and found.successful_job_count == 3 else None

    # Counts are written with the heartbeat (every third of the TTL), not per delivery.
    seen = wait_for(counted, timeout=10, what="the delivered count in the worker's hash")
    assert seen.failed_job_count == 0 and seen.total_working_time > 0
    assert seen.state == "idle" and seen.last_heartbeat is not None and seen.birth_date is not None
    assert seen.last_heartbeat >= seen.birth_date

    os.kill(pid, 9)
    short_ttl_worker.proc.wait()
    killed_at = time.monotonic()

    def gone() -> bool:
        # rq drops a member whose hash is gone when it lists the workers; a listing that ran while the
        # hash expired may have seen it exist, then read it empty, and left the member to the next one.
        return _ours(redis, pid) is None and listed.key.encode() not in redis.smembers(keys.rq.workers)

    wait_for(gone, timeout=10, what="the killed worker's entry to expire and leave rq's list")
    assert time.monotonic() - killed_at < 5


def test_a_worker_stopped_cleanly_leaves_at_once(settings: Settings, redis: Redis, env: dict[str, str]) -> None:
    process = Process(["worker"], env, "worker-clean").start()
    try:
        assert process.proc is not None
        pid = process.proc.pid
        listed = wait_for(lambda: _ours(redis, pid), timeout=20, what="the worker in rq's registry")
    finally:
        process.stop()
    assert _ours(redis, pid) is None
    assert redis.hget(listed.key, "death") is not None
