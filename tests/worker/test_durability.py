"""Nothing acknowledged is lost: a killed worker, a restarted Redis."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from redis import Redis

from svcgw.config.settings import Settings
from svcgw.storage.keys import PLAIN as keys
from tests.conftest import provision
from tests.support import Process, Sink, free_port, is_delivered, start_server, wait_for
from tests.worker.support import flip, kind, started

# Real processes of the service: run by .ci/run with the rest; `-m 'not slow'` skips them.
pytestmark = pytest.mark.slow


class OwnRedis:
    """A redis-server of the test's own, on another port, fsyncing every write."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = Redis.from_url(self.url, socket_connect_timeout=0.2)

        def up() -> bool:
            try:
                return bool(client.ping())
            except Exception:
                return False

        wait_for(up, timeout=10, what="redis-server to start")
        client.close()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    server.kill()


def test_killed_worker_mid_delivery_loses_nothing(
    env: dict[str, str], settings: Settings, server: str, sink: Sink, redis: Redis
) -> None:
    slow_env = dict(env, SVCGW_DELIVERY_TIMEOUT="10", SVCGW_LEASE_SECONDS="2")
    sink.set(delay=5)
    tenant = provision(settings, url=sink.url)
    answer = httpx.post(tenant.receiver_url(server), content=b'{"event_type":"Msg","events":[{"id":"k9"}]}')
    assert answer.status_code == 200

    first = Process(["worker"], slow_env, "worker-1").start()
    try:
        wait_for(sink.posts, timeout=15, what="the worker to start the delivery")
    finally:
        first.kill()  # SIGKILL while the POST is in flight: no chance to hand it back
    delivery_id = sink.posts()[0].headers["x-svc-delivery-id"]
    assert redis.hget(keys.delivery(delivery_id), "state") is None  # pending: no state until an attempt ends

    sink.set(delay=0)
    second = Process(["worker"], slow_env, "worker-2").start()
    try:
        wait_for(lambda: is_delivered(redis, delivery_id), timeout=20,
                 what="the restarted worker to deliver")
    finally:
        second.stop()
    ids = {p.headers["x-svc-delivery-id"] for p in sink.posts()}
    assert ids == {delivery_id} and len(sink.posts()) >= 2


def test_a_worker_killed_mid_attempt_does_not_stall_an_instances_service_events(
    env: dict[str, str], settings: Settings, sink: Sink, redis: Redis
) -> None:
    slow_env = dict(env, SVCGW_DELIVERY_TIMEOUT="10", SVCGW_LEASE_SECONDS="2")
    # The first attempt of the first event hangs; the worker making it is killed meanwhile.
    sink.rule = lambda post, earlier: (200, 5.0 if not earlier else 0.0)
    tenant = started(settings, sink.url)
    offline = flip(settings, tenant.appid, offline=True)
    recovered = flip(settings, tenant.appid, offline=False)

    first = Process(["worker"], slow_env, "worker-1").start()
    try:
        wait_for(sink.posts, timeout=15, what="the worker to start the first delivery")
    finally:
        first.kill()  # SIGKILL mid-attempt: nothing is handed back, nothing recorded
    assert redis.hget(keys.rq.job(recovered), "status") == b"deferred"

    second = Process(["worker"], slow_env, "worker-2").start()
    try:
        wait_for(lambda: is_delivered(redis, recovered), timeout=30,
                 what="the lease to run out and both events to be delivered")
    finally:
        second.stop()
    posts = sink.posts()
    assert [kind(p) for p in posts] == ["InstanceOffline", "InstanceOffline", "InstanceRecovered"]
    assert [p.headers["x-svc-delivery-id"] for p in posts] == [offline, offline, recovered]
    assert redis.llen(keys.service_events(tenant.appid)) == 0


def test_redis_restart_under_load_loses_no_acknowledged_event(
    env: dict[str, str], own_redis: OwnRedis, sink: Sink, tmp_path: Path
) -> None:
    own_env = dict(env, SVCGW_REDIS_URL=own_redis.url)
    settings = Settings.from_env(own_env)
    tenant = provision(settings, url=sink.url)
    server_proc, base = start_server(own_env)
    worker = Process(["worker"], own_env, "worker").start()
    acknowledged: list[str] = []
    refused = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal refused
        with httpx.Client(timeout=5) as client:
            for n in range(3000):  # bounded in count and in time
                if stop.is_set():
                    return
                event_id = f"ev-{n}"
                body = orjson.dumps({"event_type": "Msg", "events": [{"id": event_id, "n": n}]})
                try:
                    answer = client.post(tenant.receiver_url(base), content=body)
                except httpx.HTTPError:
                    refused += 1
                    continue
                if answer.status_code == 200:
                    acknowledged.append(event_id)
                else:
                    refused += 1

    loader = threading.Thread(target=load)
    loader.start()
    try:
        wait_for(lambda: len(acknowledged) >= 100, timeout=30, what="load to build up")
        own_redis.kill()
        wait_for(lambda: refused > 0, timeout=10, what="posts to be refused while Redis is down")
        own_redis.start()
        count = len(acknowledged)
        wait_for(lambda: len(acknowledged) >= count + 100 or not loader.is_alive(), timeout=30,
                 what="posts to be acknowledged again")
    finally:
        stop.set()
        loader.join(timeout=30)
    try:
        def delivered() -> set[str]:
            return {e["id"] for p in sink.posts() for e in orjson.loads(p.body)["events"]}

        wait_for(lambda: set(acknowledged) <= delivered(), timeout=60,
                 what=f"all {len(acknowledged)} acknowledged events to be delivered")
    finally:
        worker.stop()
        server_proc.stop()
    assert refused > 0 and len(acknowledged) >= 200
