"""The delivery engine: the claim script's deferrals, the caps per destination and per account, failed attempts."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import pytest
from redis import Redis

from svcgw.callbacks.outbound import Response, Sender
from svcgw.config.settings import Settings
from svcgw.delivery.claim import held_as
from svcgw.registry.store import Scope, Store
from svcgw.storage.keys import PLAIN as keys
from svcgw.vault import TokenVault
from tests.conftest import Tenant, provision, with_store
from tests.support import Sink, attempt_records, wait_for
from tests.svcgw.delivery.test_deadletters import ingest
from tests.worker.support import claim_batch, with_queue
from worker.concurrencycaps import SocketSlots
from worker.engine import Engine, lane, loop_factory


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
    assert redis.zscore(keys.rq.scheduled(settings.queue_name), delivery_id) == pytest.approx(due)
    assert redis.hget(keys.rq.job(delivery_id), "status") == b"scheduled"
    assert redis.zcard(keys.inflight(settings.queue_name)) == 0

    redis.zrem(keys.rq.scheduled(settings.queue_name), delivery_id)
    redis.rpush(keys.rq.queue(settings.queue_name), delivery_id)
    (claimed,) = claim_batch(settings, 10, {"other:1": due})
    assert claimed.delivery_id == delivery_id and claimed.own["url"] == url
    assert redis.hget(keys.rq.job(delivery_id), "status") == b"started"


def test_claim_script_defers_jobs_of_busy_accounts(settings: Settings, redis: Redis) -> None:
    tenant = provision(settings, url="http://127.0.0.1:8080/hook")
    delivery_id = ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"d1"}]}')
    due = time.time() + 30
    assert with_queue(settings, lambda queue: queue.claim_batch(10, "test", {}, {tenant.account: due})) == []
    assert redis.zscore(keys.rq.scheduled(settings.queue_name), delivery_id) == pytest.approx(due)
    assert redis.hget(keys.rq.job(delivery_id), "status") == b"scheduled"


def test_a_claim_pops_more_ids_while_many_go_back_unstarted(settings: Settings) -> None:
    # Three in four started: a third more ids fill the same slots, never more than are free.
    engine = Engine(settings, None, TokenVault.from_settings(settings))
    assert engine._claim_size(500) == 100
    for _ in range(30):
        engine._started(75, 100)
    assert engine._claim_size(500) == 133
    assert engine._claim_size(120) == 120
    for _ in range(30):
        engine._started(0, 100)
    assert engine._claim_size(1000) == 200
    for _ in range(30):
        engine._started(100, 100)
    assert engine._claim_size(500) == 100
    engine._started(0, 0)  # an empty queue says nothing of the share
    assert engine._claim_size(500) == 100


# --- the engine in this process, against real loopback sinks ----------------------------
class Running:
    """An engine delivering in a thread of the test process until stopped."""

    def __init__(self, settings: Settings, client: Sender | None = None) -> None:
        self.engine = Engine(settings, None, TokenVault.from_settings(settings), client=client)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self._started.set()
            await self.engine.serve(self._stop)

        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(main())

    def __enter__(self) -> Running:
        self.thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        # The engine's stop signal belongs to its loop: set it there.
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(30)
        assert not self.thread.is_alive()


def _post(settings: Settings, tenant: Tenant, event_id: str) -> str:
    return ingest(settings, tenant, b'{"event_type":"Msg","events":[{"id":"%s"}]}' % event_id.encode())


def _instance(settings: Settings, account: str, url: str) -> Tenant:
    """One more instance of ``account`` with its own callback address."""

    async def action(store: Store) -> Tenant:
        appid = "we_" + os.urandom(8).hex()[:15]
        token = await store.register_instance(appid, account)
        await store.set_callback(Scope(appid=appid), url)
        return Tenant(account, appid, token)

    return with_store(settings, action)


def _hanging_sink() -> Sink:
    sink = Sink().start()
    sink.set(delay=60)  # longer than any delivery timeout: every attempt holds its slot until it times out
    return sink


def test_a_socket_full_for_one_account_holds_back_its_jobs_only_and_one_at_its_ceiling_everyones(
    settings: Settings,
) -> None:
    now = [1000.0]
    engine = Engine(settings, None, TokenVault.from_settings(settings))
    engine.gate.slots = SocketSlots(settings.destination_concurrency, 10.0, clock=lambda: now[0])
    engine.gate.hosts = SocketSlots(settings.host_ceiling, 10.0, clock=lambda: now[0])
    engine.gate.sockets._remember("hooks.test:8080", ("10.0.0.1:8080",), time.monotonic())
    for _ in range(settings.destination_concurrency):
        assert engine.gate.slots.acquire(lane("acc_m", "10.0.0.1:8080")) is not None
        assert engine.gate.hosts.acquire("10.0.0.1:8080") is not None
    now[0] += 1.0  # its attempts are not quick: its jobs go back to the schedule rather than wait
    # The account's own cap on the socket is full: its jobs there are held back, no one else's.
    assert set(engine.gate.saturated(engine.keys)) == {held_as("acc_m", "hooks.test:8080")}
    assert engine.gate.slots.acquire(lane("acc_v", "10.0.0.1:8080")) is not None
    while engine.gate.hosts.acquire("10.0.0.1:8080") is not None:
        pass
    # Every account's together at the host's ceiling: every account's jobs there are held back.
    assert set(engine.gate.saturated(engine.keys)) == {held_as("acc_m", "hooks.test:8080"), "hooks.test:8080"}
    assert settings.host_ceiling > settings.destination_concurrency


def test_every_spelling_of_one_socket_shares_one_destination_cap(env: dict[str, str], sink: Sink) -> None:
    settings = Settings.from_env(
        dict(env, SVCGW_DELIVERY_CONCURRENCY="4", SVCGW_DESTINATION_CONCURRENCY="2", SVCGW_DELIVERY_TIMEOUT="4")
    )
    hanging = _hanging_sink()
    try:
        port = urlsplit(hanging.url).port
        spellings = [f"127.0.0.1:{port}", f"127.0.0.1:0{port}", f"localhost:{port}", f"127.1:{port}"]
        first = provision(settings)
        for n, spelling in enumerate(spellings):
            _post(settings, _instance(settings, first.account, f"http://{spelling}/hook"), f"h{n}")
        other = provision(settings, url=sink.url)
        _post(settings, other, "o1")
        started = time.monotonic()
        with Running(settings):
            wait_for(sink.posts, timeout=settings.delivery_timeout / 2, what="the other tenant's delivery")
            waited = time.monotonic() - started
            assert len(hanging.posts()) <= 2, "one socket got more attempts at once than its cap"
        assert waited < settings.delivery_timeout / 2
    finally:
        hanging.stop()


def test_one_account_cannot_take_every_slot(env: dict[str, str], sink: Sink) -> None:
    settings = Settings.from_env(
        dict(env, SVCGW_DELIVERY_CONCURRENCY="4", SVCGW_ACCOUNT_CONCURRENCY="2", SVCGW_DELIVERY_TIMEOUT="4")
    )
    hanging = [_hanging_sink() for _ in range(4)]
    try:
        first = provision(settings)
        for n, target in enumerate(hanging):
            _post(settings, _instance(settings, first.account, target.url), f"a{n}")
        other = provision(settings, url=sink.url)
        _post(settings, other, "o1")
        with Running(settings):
            wait_for(sink.posts, timeout=settings.delivery_timeout / 2, what="the other account's delivery")
            assert sum(len(target.posts()) for target in hanging) <= 2
    finally:
        for target in hanging:
            target.stop()


def test_a_busy_accounts_jobs_wait_unread_and_are_all_attempted_once_it_has_slots_again(
    env: dict[str, str], sink: Sink, redis: Redis
) -> None:
    # The account's two instances hang, its cap is 2: after their first reads the pop holds
    # their jobs back without reading them (their status stays queued in the scheduled
    # registry), the other account's deliveries go on, and nothing of the busy one is lost.
    settings = Settings.from_env(
        dict(env, SVCGW_DELIVERY_CONCURRENCY="8", SVCGW_ACCOUNT_CONCURRENCY="2", SVCGW_DELIVERY_TIMEOUT="2")
    )
    hanging = _hanging_sink()
    try:
        busy = provision(settings)
        instances = [_instance(settings, busy.account, hanging.url) for _ in range(2)]
        held = [_post(settings, instances[n % 2], f"b{n}") for n in range(40)]
        other = provision(settings, url=sink.url)
        scheduled = keys.rq.scheduled(settings.queue_name)

        def unread_and_waiting() -> list[str]:
            # Read at once (MULTI): promotion sets a job handed back by the read to queued too.
            pipe = redis.pipeline(transaction=True)
            for delivery_id in held:
                pipe.zscore(scheduled, delivery_id)
                pipe.hget(keys.rq.job(delivery_id), "status")
            found = pipe.execute()
            return [d for n, d in enumerate(held) if found[2 * n] is not None and found[2 * n + 1] == b"queued"]

        with Running(settings):
            wait_for(unread_and_waiting, timeout=10, what="a busy account's jobs held back at the pop")
            for n in range(10):
                _post(settings, other, f"o{n}")
            wait_for(lambda: len(sink.posts()) >= 10, timeout=10, what="the other account's deliveries")
            # Every job of the busy account is somewhere: attempted, in flight, queued or waiting.
            wait_for(
                lambda: all(attempt_records(redis, d) or _waiting(settings, redis, d) for d in held),
                timeout=10,
                what="every job of the busy account accounted for",
            )
    finally:
        hanging.stop()


def _waiting(settings: Settings, redis: Redis, delivery_id: str) -> bool:
    name = settings.queue_name
    return (
        redis.zscore(keys.rq.scheduled(name), delivery_id) is not None
        or redis.zscore(keys.inflight(name), delivery_id) is not None
        or delivery_id.encode() in redis.lrange(keys.rq.queue(name), 0, -1)
    )


class Raising:
    """A sender whose every POST raises what aiohttp raises for a header with CR/LF."""

    timeout = 1.0

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Response:
        raise ValueError("Newline or carriage return character detected in HTTP status message or header")

    async def aclose(self) -> None:
        return None


def test_an_exception_in_an_attempt_is_a_failed_attempt_and_ends_a_dead_letter(
    settings: Settings, redis: Redis
) -> None:
    tenant = provision(settings, url="http://127.0.0.1:9/hook")
    delivery_id = _post(settings, tenant, "x1")
    with Running(settings, client=Raising()):
        wait_for(
            lambda: redis.hget(keys.delivery(delivery_id), "state") == b"dead",
            timeout=15,
            what="the delivery to become a dead letter",
        )
    attempts = attempt_records(redis, delivery_id)
    assert len(attempts) == len(settings.retry_schedule) + 1
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    assert all(not a["ok"] and a["error"].startswith("ValueError: Newline") for a in attempts)
    assert redis.hget(keys.delivery(delivery_id), "attempts") == str(len(attempts)).encode()
    assert redis.zscore(keys.rq.failed(settings.queue_name), delivery_id) is not None
    assert redis.zcard(keys.inflight(settings.queue_name)) == 0


def test_a_burst_over_a_quick_destinations_cap_waits_in_the_worker_not_in_the_retry_schedule(
    env: dict[str, str], sink: Sink, redis: Redis
) -> None:
    # Thirty jobs of one destination in one claim, four at a time: the others wait in the worker
    # for its slots, as it answers, rather than going round the scheduled registry.
    settings = Settings.from_env(dict(env, SVCGW_DESTINATION_CONCURRENCY="4", SVCGW_DELIVERY_TIMEOUT="4"))
    sink.set(delay=0.02)
    tenant = provision(settings, url=sink.url)
    ids = [_post(settings, tenant, f"b{n}") for n in range(30)]
    scheduled = keys.rq.scheduled(settings.queue_name)
    seen: list[int] = []
    with Running(settings):
        deadline = time.monotonic() + 10
        while len(sink.posts()) < len(ids) and time.monotonic() < deadline:
            seen.append(int(redis.zcard(scheduled)))
            time.sleep(0.01)
    assert len(sink.posts()) == len(ids)
    assert max(seen) == 0, "jobs went back to the retry schedule"
    stamps = sorted(p.at for p in sink.posts())
    assert max(sum(1 for t in stamps if at - 0.015 < t <= at) for at in stamps) <= 4  # never over the cap
